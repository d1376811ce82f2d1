package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The coherence tests' model of what was written and read, and the
// checks of the store's final state and of the reads against it.

// write is one acknowledged (or possibly landed) write of a key.
type write struct {
	client     string
	key        string
	val        string // "" for a delete
	del        bool
	start, end time.Time
	ambiguous  bool // failed without a definite answer: may have landed
}

type model struct {
	mu        sync.Mutex
	t0        time.Time
	writes    map[string][]write
	attempted map[string]map[string]bool // key → every value anyone tried to write
	stats     map[string]map[string]int  // client → "op status" → count
	etags     map[string]string          // key → the latest ETag anyone saw
	refused   map[string]map[string]bool // key → values whose write was refused (never stored)
	reads     []readRec                  // successful reads since the last check
	bad       []string                   // violations seen while running
	slowest   map[string]time.Duration   // client → its slowest random operation
	// writesDone counts the random workload's writes and gaveUp describes
	// those whose client's own deadline ended first (see unanswered), both
	// since the last report (cohEnv.reportViolations).
	writesDone int
	gaveUp     []string
}

// maxGaveUpShare bounds the share of the random workload's writes whose
// client gave up at its own deadline (opTimeout) before nemo answered.
const maxGaveUpShare = 0.02

// unanswered records a write that ended without a definite answer: a
// violation if nemo answered so while the client still waited (ctx, the
// operation's, had not ended), else the client gave up at its own
// deadline. Under the Firestore emulator's lock timeouts a client that
// retries ABORTED can spend its whole opTimeout on one key; those are
// counted and bounded (maxGaveUpShare) rather than failed one by one, since
// no answer can reach a client that stopped waiting.
func (m *model) unanswered(ctx context.Context, format string, args ...any) {
	if ctx.Err() == nil {
		m.violation(format, args...)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gaveUp = append(m.gaveUp, fmt.Sprintf(format, args...))
}

// wrote counts one write of the random workload.
func (m *model) wrote() {
	m.mu.Lock()
	m.writesDone++
	m.mu.Unlock()
}

// took notes how long one of client's random operations took.
func (m *model) took(client string, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.slowest[client] = max(m.slowest[client], d)
}

type readRec struct {
	client, op, key, val string
	start                time.Time
}

func (m *model) read(client, op, key, val string, start time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads = append(m.reads, readRec{client, op, key, val, start})
}

func (m *model) refuse(key, val string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refused[key] == nil {
		m.refused[key] = map[string]bool{}
	}
	m.refused[key][val] = true
}

// checkReads checks the reads recorded since the last call, once every
// write they could have seen has finished: no read returns a value whose
// write was refused, and none returns a value that a later acknowledged
// write (one that started after the value's write ended) had replaced
// more than max_staleness + slack before the read started.
func (m *model) checkReads() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var bad []string
	for _, rd := range m.reads {
		var wv *write
		for i, w := range m.writes[rd.key] {
			if !w.del && w.val == rd.val {
				wv = &m.writes[rd.key][i]
				break
			}
		}
		if wv == nil {
			if m.refused[rd.key][rd.val] {
				bad = append(bad, fmt.Sprintf("%s via %s at %s: %s reads %q, whose write was refused", rd.op, rd.client, m.rel(rd.start), rd.key, rd.val))
			} else {
				bad = append(bad, fmt.Sprintf("%s via %s at %s: %s reads %q, which no write acknowledged", rd.op, rd.client, m.rel(rd.start), rd.key, rd.val))
			}
			continue
		}
		for _, w2 := range m.writes[rd.key] {
			if w2.ambiguous || !w2.start.After(wv.end) {
				continue
			}
			if age := rd.start.Sub(w2.end); age > cohStaleness+cohSlack {
				what := strconv.Quote(w2.val)
				if w2.del {
					what = "a delete"
				}
				bad = append(bad, fmt.Sprintf("%s via %s at %s: %s reads %q (written by %s [%s, %s]), replaced by %s of %s [%s, %s]: %v stale",
					rd.op, rd.client, m.rel(rd.start), rd.key, rd.val, wv.client, m.rel(wv.start), m.rel(wv.end),
					what, w2.client, m.rel(w2.start), m.rel(w2.end), age.Round(time.Millisecond)))
				break
			}
		}
	}
	m.reads = nil
	return bad
}

func newModel() *model {
	return &model{t0: time.Now(), writes: map[string][]write{}, attempted: map[string]map[string]bool{},
		stats: map[string]map[string]int{}, etags: map[string]string{}, refused: map[string]map[string]bool{}, slowest: map[string]time.Duration{}}
}

func (m *model) attempt(key, val string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.attempted[key] == nil {
		m.attempted[key] = map[string]bool{}
	}
	m.attempted[key][val] = true
}

func (m *model) count(client, op, st string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stats[client] == nil {
		m.stats[client] = map[string]int{}
	}
	m.stats[client][op+" "+st]++
}

func (m *model) record(w write) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes[w.key] = append(m.writes[w.key], w)
}

func (m *model) violation(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bad = append(m.bad, fmt.Sprintf(format, args...))
}

func (m *model) setETag(key, etag string) {
	if etag == "" {
		return
	}
	m.mu.Lock()
	m.etags[key] = etag
	m.mu.Unlock()
}

func (m *model) etag(key string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.etags[key]
}

func (m *model) rel(t time.Time) string { return fmt.Sprintf("%.3fs", t.Sub(m.t0).Seconds()) }

func (m *model) summary(t *testing.T) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var clients []string
	for c := range m.stats {
		clients = append(clients, c)
	}
	sort.Strings(clients)
	for _, c := range clients {
		var parts []string
		for k, n := range m.stats[c] {
			parts = append(parts, fmt.Sprintf("%s=%d", k, n))
		}
		sort.Strings(parts)
		if d, ok := m.slowest[c]; ok {
			parts = append(parts, "slowest="+d.Round(time.Millisecond).String())
		}
		t.Logf("  %-8s %s", c, strings.Join(parts, " "))
	}
}

// checkFinal is assertion 3 for one key: final is what the store holds
// (found=false: absent).
func (m *model) checkFinal(key, final string, found bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ws := m.writes[key]
	var acked []write
	for _, w := range ws {
		if !w.ambiguous {
			acked = append(acked, w)
		}
	}
	matches := func(w write) bool { return w.del == !found && (w.del || w.val == final) }
	if len(acked) == 0 && !found {
		return nil // never written (or only ambiguous writes): absent is right
	}
	for _, w := range ws {
		if w.ambiguous && matches(w) {
			return nil // an unanswered write may have landed last
		}
	}
	var cands []write
	for _, w := range acked {
		superseded := false
		for _, o := range acked {
			if o.start.After(w.end) {
				superseded = true
				break
			}
		}
		if !superseded {
			cands = append(cands, w)
			if matches(w) {
				return nil
			}
		}
	}
	got := "absent"
	if found {
		got = strconv.Quote(final)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "key %s: the store holds %s, not one of the last acknowledged writes; history:", key, got)
	for _, w := range ws {
		what := strconv.Quote(w.val)
		if w.del {
			what = "delete"
		}
		flag := ""
		if w.ambiguous {
			flag = " (ambiguous)"
		}
		for _, c := range cands {
			if c == w {
				flag += " (candidate)"
			}
		}
		fmt.Fprintf(&b, "\n    [%s, %s] %s %s%s", m.rel(w.start), m.rel(w.end), w.client, what, flag)
	}
	return errors.New(b.String())
}
