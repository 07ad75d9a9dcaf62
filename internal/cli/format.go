package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
)

// newTable returns a tabwriter for an aligned, space-padded table. Cells are
// separated by '\t'; call Flush at the end.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
}

// age renders how long ago t was, in its largest whole unit: "12s", "5m",
// "3h", "2d". A zero time renders as "-".
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(max(d, 0)/time.Second)) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 24*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	default:
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	}
}

// duration renders d with its two largest units: "45s", "12m3s", "1h20m",
// "2d3h". Under ten seconds it keeps a tenth, so a run of 0.8s is not shown
// as "0s": "0.8s", "1s", "9.5s".
func duration(d time.Duration) string {
	d = max(d, 0)
	if d < 10*time.Second {
		return strings.TrimSuffix(strconv.FormatFloat(d.Round(100*time.Millisecond).Seconds(), 'f', 1, 64), ".0") + "s"
	}
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	default:
		return fmt.Sprintf("%dd%dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
	}
}

// runDuration is how long something that started at start ran: until finish,
// or until now while it still runs. "-" when it never started.
func runDuration(now time.Time, start, finish *time.Time) string {
	if start == nil || start.IsZero() {
		return "-"
	}
	end := now
	if finish != nil && !finish.IsZero() {
		end = *finish
	}
	return duration(end.Sub(*start))
}

// timestamp renders an absolute time in the local zone, to the second.
func timestamp(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// dash returns s, or "-" when s is empty, so table cells are never blank.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// resources renders a resource request compactly: "gpu=1 cpu=8 mem=32GiB";
// "-" when the server sent none.
func resources(r apitypes.Resources) string {
	if r == (apitypes.Resources{}) {
		return "-"
	}
	parts := []string{
		"gpu=" + strconv.Itoa(r.GPUs),
		"cpu=" + strconv.FormatFloat(r.CPUs, 'f', -1, 64),
	}
	if r.Memory != "" {
		parts = append(parts, "mem="+memText(r.Memory))
	}
	if r.Nodes > 1 {
		parts = append(parts, "nodes="+strconv.Itoa(r.Nodes))
	}
	return strings.Join(parts, " ")
}

// ANSI colours. Every code has the same length, so a column whose cells are
// all wrapped stays aligned under text/tabwriter, which counts the bytes.
const (
	colorReset   = "\x1b[0m"
	colorDefault = "\x1b[39m"
	colorRed     = "\x1b[31m"
	colorGreen   = "\x1b[32m"
	colorYellow  = "\x1b[33m"
	colorBlue    = "\x1b[34m"
)

// stateColor is the colour a job or attempt state is shown in.
func stateColor(state string) string {
	switch state {
	case "succeeded":
		return colorGreen
	case "failed", "timed_out", "lost":
		return colorRed
	case "queued", "starting", "held", "preempted":
		return colorYellow
	case "running":
		return colorBlue
	default:
		return colorDefault
	}
}

// painter colours state cells when enabled.
type painter bool

// useColor reports whether output to w may be coloured: w is a terminal and
// NO_COLOR is unset.
func (a *app) useColor(w io.Writer) painter {
	return painter(a.env.getenv("NO_COLOR") == "" && a.env.isTerminal(w))
}

// state wraps s in its state's colour.
func (p painter) state(s string) string {
	if !p {
		return s
	}
	return stateColor(s) + s + colorReset
}

// header wraps a table header cell of a coloured column so that it has the
// same extra width as the coloured cells below it.
func (p painter) header(s string) string {
	if !p {
		return s
	}
	return colorDefault + s + colorReset
}

// writeJSON writes v as indented JSON. Characters that could drive a
// terminal are written as \u escapes (see escapeRunes), which mean the same
// to a JSON reader.
func writeJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := io.WriteString(w, escapeRunes(buf.String()))
	return err
}

// writeYAML writes v as YAML with the same field names as its JSON form
// (v's json tags), in the same order. A string holding characters that
// could drive a terminal is written double-quoted, with them as \u escapes.
func writeYAML(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var node yaml.Node
	// The YAML reader refuses raw control characters, which JSON leaves in
	// strings (DEL, C1): escaped, they read back as the same strings.
	if err := yaml.Unmarshal([]byte(escapeRunes(string(b))), &node); err != nil {
		return fmt.Errorf("convert to YAML: %w", err)
	}
	blockStyle(&node)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&node); err != nil {
		return fmt.Errorf("convert to YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("convert to YAML: %w", err)
	}
	_, err = io.WriteString(w, escapeRunes(buf.String()))
	return err
}

// blockStyle clears the flow and quoting styles that parsing JSON leaves on
// the nodes, so the encoder picks plain YAML (it still quotes where needed).
// Scalars with characters that could drive a terminal are double-quoted,
// the one style in which escapeRunes's \u escapes keep their meaning.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	if n.Kind == yaml.ScalarNode && strings.ContainsFunc(n.Value, unsafeInText) {
		n.Style = yaml.DoubleQuotedStyle
	}
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// unsafeInText reports whether r may not be printed as it is in text of
// several lines: the characters domain.UnsafeRune names but newline and tab.
func unsafeInText(r rune) bool {
	return r != '\n' && r != '\t' && domain.UnsafeRune(r)
}

// escapeRunes writes every unsafeInText rune of s as a \uXXXX escape. In
// the JSON and YAML the encoders write, such runes can only be inside
// strings (double-quoted ones, in YAML), where the escape means the same.
func escapeRunes(s string) string {
	if !strings.ContainsFunc(s, unsafeInText) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unsafeInText(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// text makes server text safe to print in a terminal: the characters that
// could drive it (domain.UnsafeRune: escape, carriage return, C1 controls,
// bidirectional overrides; newline and tab stay) are shown escaped, as
// "\x1b" or "\u202e", and so are bytes that are not UTF-8 ("\xff"). Text
// stored before the server refused such characters, or written by a job
// (file and metric names, log lines quoted as evidence), then cannot move
// the cursor, rewrite the screen or reorder what is shown.
func text(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, unsafeInText) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !unsafeInText(r):
			b.WriteString(s[i : i+n])
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += n
	}
	return b.String()
}

// humanBytes renders a byte count with a binary unit and one decimal: 1.5GiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + "B"
	}
	v, i := float64(n), -1
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + []string{"KiB", "MiB", "GiB", "TiB", "PiB"}[i]
}

// The formats of the -o/--output flag. Every command that prints data takes
// the same four (docs/cli.md, "Output formats"); a command whose data also
// makes sense as rows of numbers adds csv.
const (
	formatTable = "table" // the human view, the default
	formatWide  = "wide"  // the human view with more columns, where there are more
	formatJSON  = "json"  // the API's own objects, indented
	formatYAML  = "yaml"  // the same objects and field names as YAML
	formatCSV   = "csv"
)

// outputFormats are the formats every data command's -o takes.
var outputFormats = []string{formatTable, formatWide, formatJSON, formatYAML}

// outputAnnotation marks a command that takes -o, with its formats; the
// completion of -o and the contract test read it.
const outputAnnotation = "trainyard/output-formats"

// outputFlag registers -o/--output with the standard formats and any extra
// ones (csv), and returns the chosen format and a validator to call first
// in RunE. The format is "" for the table (the default, or -o table), so
// commands compare only against the other formats; "wide" is the table
// where a command has no extra columns.
func outputFlag(cmd *cobra.Command, extra ...string) (*string, func() error) {
	formats := append(slices.Clone(outputFormats), extra...)
	var v string
	cmd.Flags().StringVarP(&v, "output", "o", formatTable, "output format: "+strings.Join(formats, "|"))
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[outputAnnotation] = strings.Join(formats, ",")
	_ = cmd.RegisterFlagCompletionFunc("output", completeFrom(formats))
	return &v, func() error {
		if !slices.Contains(formats, v) && v != "" {
			return usageErrorf("invalid --output %q: want one of %s", v, strings.Join(formats, ", "))
		}
		if v == formatTable {
			v = ""
		}
		return nil
	}
}

// structured reports whether format is one for programs (json, yaml)
// rather than a person's view (table, wide).
func structured(format string) bool {
	return format == formatJSON || format == formatYAML
}

// memText renders a memory size the server sent exactly ("24683656KiB")
// for a person: its largest binary unit with one decimal, a whole number
// without it ("23.5GiB", "32GiB"). What does not parse is shown as it is.
func memText(s string) string {
	b, err := domain.ParseByteSize(s)
	if err != nil || b < 0 {
		return cell(s)
	}
	return strings.Replace(humanBytes(int64(b)), ".0", "", 1)
}

// writeStructured writes v as JSON or YAML when format is "json" or "yaml"
// and reports whether it did; any other format is left to the caller.
func writeStructured(w io.Writer, format string, v any) (bool, error) {
	switch format {
	case formatJSON:
		return true, writeJSON(w, v)
	case formatYAML:
		return true, writeYAML(w, v)
	}
	return false, nil
}
