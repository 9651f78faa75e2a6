package main

import (
	"fmt"
	"math"
	"os"
	"strings"
)

// The plot: for each load client a row of two grouped bar charts, rps and
// p99 latency by scenario, one bar per target. Plain SVG, no dependencies.

const (
	chartW, chartH = 480, 280
	marginL        = 64
	marginR        = 16
	marginT        = 40
	marginB        = 56
)

var targetColors = map[string]string{
	targetNoop:            "#9e9e9e",
	targetNaive:           "#e07b39",
	targetEmbedded:        "#6a9fd8",
	targetEmbeddedRelaxed: "#b7d0ec",
	targetClaimd:          "#1f4e96",
}

func writeSVG(path string, r *Report) error {
	rows := len(r.Options.Clients)
	legendH := 30
	width, height := 2*chartW, rows*chartH+legendH
	var w strings.Builder
	fmt.Fprintf(&w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&w, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	for i, cl := range r.Options.Clients {
		y := i * chartH
		rps := func(x *Result) float64 { return x.Rate }
		p99 := func(x *Result) float64 { return x.P99 }
		barChart(&w, r, 0, y, fmt.Sprintf("rate by scenario (%s; lifecycle: events/s)", cl), cl, rps, "%.0f")
		barChart(&w, r, chartW, y, fmt.Sprintf("p99 latency, ms (%s)", cl), cl, p99, "%.1f")
	}
	// Legend.
	lx, ly := marginL, rows*chartH+10
	for _, t := range r.Options.Targets {
		fmt.Fprintf(&w, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/>`, lx, ly, targetColors[t])
		fmt.Fprintf(&w, `<text x="%d" y="%d">%s</text>`+"\n", lx+16, ly+10, esc(display(displayNames, t)))
		lx += 150
	}
	w.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(w.String()), 0o644)
}

// barChart draws one chart at (x0, y0): a group per scenario, a bar per
// target, value(run) as the bar's height.
func barChart(w *strings.Builder, r *Report, x0, y0 int, title, client string, value func(*Result) float64, format string) {
	plotW, plotH := chartW-marginL-marginR, chartH-marginT-marginB
	maxV := 0.0
	for _, sc := range r.Options.Scenarios {
		for _, t := range r.Options.Targets {
			if x := r.find(t, sc, client); x != nil {
				maxV = math.Max(maxV, value(x))
			}
		}
	}
	top := niceCeil(maxV)
	fmt.Fprintf(w, `<text x="%d" y="%d" font-size="13" font-weight="bold">%s</text>`+"\n", x0+marginL, y0+22, esc(title))
	// Axis and grid.
	for i := 0; i <= 4; i++ {
		v := top * float64(i) / 4
		y := float64(y0+marginT+plotH) - float64(plotH)*float64(i)/4
		fmt.Fprintf(w, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`, x0+marginL, y, x0+marginL+plotW, y)
		fmt.Fprintf(w, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", x0+marginL-6, y+4, fmt.Sprintf(format, v))
	}
	groups := r.Options.Scenarios
	groupW := float64(plotW) / float64(max(len(groups), 1))
	barW := groupW * 0.8 / float64(max(len(r.Options.Targets), 1))
	for gi, sc := range groups {
		gx := float64(x0+marginL) + groupW*float64(gi) + groupW*0.1
		for ti, t := range r.Options.Targets {
			x := r.find(t, sc, client)
			if x == nil || top == 0 {
				continue
			}
			h := float64(plotH) * value(x) / top
			bx := gx + barW*float64(ti)
			by := float64(y0+marginT+plotH) - h
			fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s, %s: %s</title></rect>`+"\n",
				bx, by, barW-1, h, targetColors[t], esc(display(displayNames, t)), esc(sc), fmt.Sprintf(format, value(x)))
		}
		fmt.Fprintf(w, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n",
			gx+groupW*0.4, y0+marginT+plotH+16, esc(display(scenarioNames, sc)))
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
