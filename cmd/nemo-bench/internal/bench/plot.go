package bench

import (
	"fmt"
	"os"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// plotFigure draws f's results as a PNG of two panels, throughput and
// remote requests per operation, one line per series; a series' color is its name, its dash pattern its
// group.
func plotFigure(path string, f figure, rs []Result) error {
	var mine []Result
	for _, r := range rs {
		if r.Figure == f.name {
			mine = append(mine, r)
		}
	}
	left := panel(f, mine, f.title, "operations per second", Result.Throughput)
	right := panel(f, mine, "remote requests per operation (lower is better)", "remote requests / op", Result.RemotePerOp)
	if left == nil || right == nil {
		return fmt.Errorf("no results for %s", f.name)
	}
	img := vgimg.New(13*vg.Inch, 5*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: 8 * vg.Millimeter, PadTop: 3 * vg.Millimeter, PadBottom: 3 * vg.Millimeter, PadLeft: 3 * vg.Millimeter, PadRight: 3 * vg.Millimeter}
	cs := plot.Align([][]*plot.Plot{{left, right}}, tiles, dc)
	left.Draw(cs[0][0])
	right.Draw(cs[0][1])
	w, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// panel plots y of every series of rs over f's x axis.
func panel(f figure, rs []Result, title, ylabel string, y func(Result) float64) *plot.Plot {
	if len(rs) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = f.xlabel
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	var xs []float64
	var ticks []plot.Tick
	for _, r := range rs {
		if !slices.Contains(xs, r.X) {
			xs = append(xs, r.X)
			ticks = append(ticks, plot.Tick{Value: r.X, Label: f.xfmt(r.X)})
		}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	if f.logX {
		p.X.Scale = plot.LogScale{}
	}
	// Headroom above the highest point for the legend.
	top := 0.0
	for _, r := range rs {
		top = max(top, y(r))
	}
	p.Y.Max = 1.35 * max(top, 1e-9)
	var names, groups []string
	for _, r := range rs {
		if !slices.Contains(names, r.Series) {
			names = append(names, r.Series)
		}
		if !slices.Contains(groups, r.Group) {
			groups = append(groups, r.Group)
		}
	}
	for _, g := range groups {
		for _, n := range names {
			var pts plotter.XYs
			for _, r := range rs {
				if r.Series == n && r.Group == g {
					pts = append(pts, plotter.XY{X: r.X, Y: y(r)})
				}
			}
			if len(pts) == 0 {
				continue
			}
			l, sc, err := plotter.NewLinePoints(pts)
			if err != nil {
				continue // a NaN or Inf point: nothing sensible to draw
			}
			i, j := slices.Index(names, n), slices.Index(groups, g)
			l.Color = plotutil.Color(i)
			l.Dashes = plotutil.Dashes(j)
			l.Width = vg.Points(1.5)
			sc.Color = plotutil.Color(i)
			sc.Shape = plotutil.Shape(j)
			p.Add(l, sc)
			p.Legend.Add(series{name: n, group: g}.label(), l, sc)
		}
	}
	return p
}
