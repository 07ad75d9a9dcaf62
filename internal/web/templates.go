package web

import (
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"

	"trainyard/internal/domain"
)

// templates are the pages, each parsed with the layout and the parts (the
// fragments pages share and live updates render alone).
type templates struct {
	pages map[string]*template.Template
	parts *template.Template
}

func (t templates) page(w io.Writer, name string, data any) error {
	p, ok := t.pages[name]
	if !ok {
		return fmt.Errorf("no page template %q", name)
	}
	return p.ExecuteTemplate(w, "layout", data)
}

func (t templates) part(w io.Writer, name string, data any) error {
	return t.parts.ExecuteTemplate(w, name, data)
}

// parseTemplates parses the embedded templates; a mistake in one is a
// programming error, caught by every test.
func parseTemplates() templates {
	base := template.Must(template.New("").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/parts.html"))
	t := templates{pages: map[string]*template.Template{}, parts: base}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		panic(err)
	}
	for _, n := range names {
		name := path.Base(n)
		if name == "layout.html" || name == "parts.html" {
			continue
		}
		t.pages[name] = template.Must(template.Must(base.Clone()).ParseFS(templateFS, n))
	}
	return t
}

var funcs = template.FuncMap{
	"ago":      ago,
	"when":     when,
	"duration": jobDuration,
	"bytes":    func(n int64) string { return domain.ByteSize(n).String() },
	"stateClass": func(s domain.JobState) string {
		return "state-" + string(s)
	},
	"join": strings.Join,
}

// when formats t for a table cell ("" for zero).
func when(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// ago says how long before now t was, roughly.
func ago(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return roughly(time.Since(t)) + " ago"
}

func roughly(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// jobDuration is how long j ran: from its first start to its end (or
// now), "" when it never started.
func jobDuration(j *domain.Job) string {
	if j.StartedAt.IsZero() {
		return ""
	}
	end := j.FinishedAt
	if end.IsZero() {
		end = time.Now()
	}
	return roughly(end.Sub(j.StartedAt))
}
