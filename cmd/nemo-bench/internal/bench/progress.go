package bench

import (
	"fmt"
	"io"
	"strings"
)

// progress shows an experiment's runs: on a terminal one bar redrawn in
// place, otherwise one plain line per finished run.
type progress struct {
	w        io.Writer
	terminal bool
	name     string
	total    int
	cur      int
}

func newProgress(w io.Writer, terminal bool, name string, total int) *progress {
	return &progress{w: w, terminal: terminal, name: name, total: total}
}

const barWidth = 30

// step announces run i (0-based) of the experiment.
func (p *progress) step(i int, what string) {
	p.cur = i
	if !p.terminal {
		return
	}
	filled := barWidth * i / max(p.total, 1)
	fmt.Fprintf(p.w, "\r\033[K%-8s [%s%s] %d/%d %s", p.name,
		strings.Repeat("#", filled), strings.Repeat(".", barWidth-filled), i, p.total, what)
}

// result reports a finished run.
func (p *progress) result(t task, r Result) {
	if p.terminal {
		return
	}
	fmt.Fprintf(p.w, "%s %d/%d: %s %s=%s: %.0f ops/s, %.3f remote/op, hit %.2f, p50 %v, p99 %v, aborts %d\n",
		p.name, p.cur+1, p.total, t.s.label(), t.fig.xlabel, t.fig.xfmt(t.x),
		r.Throughput(), r.RemotePerOp(), r.HitRatio(), r.P50, r.P99, r.Aborts)
}

func (p *progress) done() {
	if p.terminal {
		fmt.Fprintf(p.w, "\r\033[K%-8s [%s] %d/%d done\n", p.name, strings.Repeat("#", barWidth), p.total, p.total)
	}
}

func (p *progress) fail() {
	if p.terminal {
		fmt.Fprintln(p.w)
	}
}
