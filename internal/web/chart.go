package web

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strconv"
	"strings"
)

// A chart is drawn on the server as inline SVG: one line per series over
// a shared x axis, with its extremes labelled. It needs no script, so it
// works under the strict content policy and in a page saved to disk.

// point is one (x, y) of a series.
type point struct{ X, Y float64 }

// series is one named line of a chart.
type series struct {
	Name   string
	Points []point
}

// chart geometry, in SVG user units.
const (
	chartW, chartH         = 640, 220
	padL, padR, padT, padB = 56, 12, 22, 26
)

// palette colours the series in order.
var palette = []string{"#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"}

// svgChart draws the series under title; xLabel names the x axis and
// yFmt formats a y value for its labels. Series with no points are left
// out; a chart with none says so.
func svgChart(title, xLabel string, yFmt func(float64) string, ss ...series) template.HTML {
	if yFmt == nil {
		yFmt = shortNum
	}
	minX, maxX, minY, maxY := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	n := 0
	for _, s := range ss {
		for _, p := range s.Points {
			if math.IsNaN(p.Y) || math.IsInf(p.Y, 0) {
				continue
			}
			minX, maxX = math.Min(minX, p.X), math.Max(maxX, p.X)
			minY, maxY = math.Min(minY, p.Y), math.Max(maxY, p.Y)
			n++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s" data-points="%d" xmlns="http://www.w3.org/2000/svg">`,
		chartW, chartH, html.EscapeString(title), n)
	fmt.Fprintf(&b, `<title>%s</title>`, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%d" y="14" class="chart-title">%s</text>`, padL, html.EscapeString(title))
	if n == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d" class="chart-empty">no data yet</text></svg>`, chartW/2-30, chartH/2)
		return template.HTML(b.String())
	}
	if maxX == minX {
		maxX = minX + 1
	}
	if maxY == minY {
		maxY, minY = maxY+math.Max(math.Abs(maxY)*0.05, 0.5), minY-math.Max(math.Abs(minY)*0.05, 0.5)
	}
	x0, x1 := float64(padL), float64(chartW-padR)
	y0, y1 := float64(chartH-padB), float64(padT)
	sx := func(x float64) float64 { return x0 + (x-minX)/(maxX-minX)*(x1-x0) }
	sy := func(y float64) float64 { return y0 + (y-minY)/(maxY-minY)*(y1-y0) }
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" class="chart-frame"/>`, padL, padT, chartW-padL-padR, chartH-padT-padB)
	fmt.Fprintf(&b, `<text x="%d" y="%d" class="chart-label" text-anchor="end">%s</text>`, padL-4, padT+8, html.EscapeString(yFmt(maxY)))
	fmt.Fprintf(&b, `<text x="%d" y="%d" class="chart-label" text-anchor="end">%s</text>`, padL-4, chartH-padB, html.EscapeString(yFmt(minY)))
	fmt.Fprintf(&b, `<text x="%d" y="%d" class="chart-label">%s</text>`, padL, chartH-8, html.EscapeString(shortNum(minX)))
	fmt.Fprintf(&b, `<text x="%d" y="%d" class="chart-label" text-anchor="middle">%s</text>`, (padL+chartW-padR)/2, chartH-8, html.EscapeString(xLabel))
	fmt.Fprintf(&b, `<text x="%d" y="%d" class="chart-label" text-anchor="end">%s</text>`, chartW-padR, chartH-8, html.EscapeString(shortNum(maxX)))
	for i, s := range ss {
		if len(s.Points) == 0 {
			continue
		}
		colour := palette[i%len(palette)]
		fmt.Fprintf(&b, `<polyline class="chart-line" fill="none" stroke="%s" stroke-width="1.5" data-series="%s" points="`, colour, html.EscapeString(s.Name))
		for j, p := range s.Points {
			if math.IsNaN(p.Y) || math.IsInf(p.Y, 0) {
				continue
			}
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.FormatFloat(sx(p.X), 'f', 1, 64))
			b.WriteByte(',')
			b.WriteString(strconv.FormatFloat(sy(p.Y), 'f', 1, 64))
		}
		b.WriteString(`"/>`)
		if len(ss) > 1 {
			fmt.Fprintf(&b, `<text x="%d" y="14" class="chart-legend" fill="%s">%s</text>`, chartW-padR-110*(len(ss)-i), colour, html.EscapeString(s.Name))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// shortNum formats v in at most about four significant digits.
func shortNum(v float64) string {
	a := math.Abs(v)
	switch {
	case v == math.Trunc(v) && a < 1e6:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case a >= 1e6 || (a < 1e-3 && a > 0):
		return strconv.FormatFloat(v, 'g', 3, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 4, 64)
}
