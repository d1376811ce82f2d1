package peer

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/txn"
)

// Rebalancing (coherence.peers): every coherence.rebalance_interval each
// replica looks at how many keyspaces each of its peers owns (Status) and,
// if it owns at least two more than the least loaded one and more than
// its fair share (the total over the replicas that answered, rounded up),
// hands its coldest keyspace over (txn.Engine.Handover: wait for the
// transactions using it, write it back, truncate its log, release its
// lease) and asks that peer to take it (Take: txn.Engine.Acquire). One
// keyspace per round and replica, so ownership moves a step at a time and
// every step is a complete hand-over. If the peer cannot take it, the next
// replica that writes it does. Replicas count keyspaces, not load: a hot
// table is pinned by hand (docs/coherence.md).

// Balancer is what a rebalance needs of the engine.
type Balancer interface {
	Owned() []txn.Owned
	Handover(ctx context.Context, ks adapters.Keyspace) error
}

// RebalanceOptions configure Rebalance.
type RebalanceOptions struct {
	// Peers are the replicas' peer addresses (coherence.peers): host:port
	// each, a host name standing for every address it resolves to (a
	// headless Service). This node's own address (Options.Self) may be
	// among them.
	Peers []string
	// Interval between rounds (coherence.rebalance_interval).
	Interval time.Duration
	// HandoverTimeout bounds one hand-over, its wait for the
	// transactions using the keyspace included.
	HandoverTimeout time.Duration
	// Resolve looks a host name up (default net.DefaultResolver).
	Resolve func(ctx context.Context, host string) ([]string, error)
}

// Rebalance moves keyspaces from this node to peers that own fewer, one
// per round, until ctx ends.
func (c *Client) Rebalance(ctx context.Context, b Balancer, o RebalanceOptions) {
	if o.Resolve == nil {
		o.Resolve = net.DefaultResolver.LookupHost
	}
	r := &rebalancer{c: c, b: b, o: o, seen: map[adapters.Keyspace]uint64{}, log: c.opts.Logger.With("component", "rebalance")}
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.round(ctx)
	}
}

// Moved counts the keyspaces this node has handed over to a peer that
// took them (nemo_rebalance_moves_total).
func (c *Client) Moved() uint64 { return c.moved.Load() }

type rebalancer struct {
	c    *Client
	b    Balancer
	o    RebalanceOptions
	seen map[adapters.Keyspace]uint64 // each owned keyspace's LastSeq at the last round
	log  *slog.Logger
}

// round makes one look and at most one move.
func (r *rebalancer) round(ctx context.Context) {
	owned := r.b.Owned()
	loads := map[string]int{}
	for _, addr := range r.peers(ctx) {
		sctx, cancel := context.WithTimeout(ctx, r.o.Interval)
		n, draining, err := r.c.Status(sctx, addr)
		cancel()
		if err != nil || draining {
			continue // a peer that does not answer, or leaves, takes nothing
		}
		loads[addr] = n
	}
	ks, to := plan(owned, r.seen, loads)
	clear(r.seen)
	for _, o := range owned {
		r.seen[o.Keyspace] = o.LastSeq
	}
	if ks == "" {
		return
	}
	r.log.Info("handing a keyspace over to a peer that owns fewer", "keyspace", ks, "to", to, "owned", len(owned), "theirs", loads[to])
	hctx, cancel := context.WithTimeout(ctx, r.o.HandoverTimeout)
	err := r.b.Handover(hctx, ks)
	cancel()
	if err != nil {
		r.log.Warn("rebalance: hand-over abandoned; the keyspace stays here", "keyspace", ks, "err", err)
		return
	}
	tctx, cancel := context.WithTimeout(ctx, r.o.HandoverTimeout)
	err = r.c.Take(tctx, to, ks)
	cancel()
	if err != nil {
		r.log.Warn("rebalance: the peer did not take the keyspace over; its next writer will", "keyspace", ks, "to", to, "err", err)
		return
	}
	r.c.moved.Add(1)
	r.log.Info("keyspace moved", "keyspace", ks, "to", to)
}

// plan picks the move of one round: the coldest keyspace of owned (the
// fewest commits since the last round, per seen; one not in use first;
// then by name) and the least loaded peer (then by address), if this node
// owns more than its fair share and at least two more than that peer;
// else "".
func plan(owned []txn.Owned, seen map[adapters.Keyspace]uint64, loads map[string]int) (adapters.Keyspace, string) {
	if len(loads) == 0 || len(owned) == 0 {
		return "", ""
	}
	total, to := len(owned), ""
	for _, addr := range slices.Sorted(maps.Keys(loads)) {
		total += loads[addr]
		if to == "" || loads[addr] < loads[to] {
			to = addr
		}
	}
	n := len(loads) + 1
	fair := (total + n - 1) / n
	if len(owned) <= fair || len(owned)-loads[to] < 2 {
		return "", ""
	}
	best := slices.MinFunc(owned, func(a, b txn.Owned) int {
		if (a.InUse == 0) != (b.InUse == 0) {
			if a.InUse == 0 {
				return -1
			}
			return 1
		}
		if da, db := a.LastSeq-min(a.LastSeq, seen[a.Keyspace]), b.LastSeq-min(b.LastSeq, seen[b.Keyspace]); da != db {
			if da < db {
				return -1
			}
			return 1
		}
		return strings.Compare(string(a.Keyspace), string(b.Keyspace))
	})
	return best.Keyspace, to
}

// peers resolves RebalanceOptions.Peers into addresses, without this
// node's own. A name that does not resolve is skipped (and said at DEBUG):
// the peers it stands for take nothing this round.
func (r *rebalancer) peers(ctx context.Context) []string {
	var out []string
	for _, p := range r.o.Peers {
		host, port, err := net.SplitHostPort(p)
		if err != nil {
			continue // config.Validate refuses it
		}
		hosts := []string{host}
		if net.ParseIP(host) == nil {
			rctx, cancel := context.WithTimeout(ctx, r.o.Interval)
			hosts, err = r.o.Resolve(rctx, host)
			cancel()
			if err != nil {
				r.log.Debug("rebalance: a peer name does not resolve", "peer", p, "err", err)
				continue
			}
		}
		for _, h := range hosts {
			addr := net.JoinHostPort(h, port)
			if addr != r.c.opts.Self && !slices.Contains(out, addr) {
				out = append(out, addr)
			}
		}
	}
	return out
}

// Status asks the peer at addr how many keyspaces it owns, and whether
// it is draining.
func (c *Client) Status(ctx context.Context, addr string) (owned int, draining bool, err error) {
	var rep statusReply
	if err := c.invoke(ctx, addr, methodStatus, &statusRequest{}, &rep); err != nil {
		return 0, false, err
	}
	return rep.owned, rep.draining, nil
}

// Take asks the peer at addr to take ks over (it was handed over here).
func (c *Client) Take(ctx context.Context, addr string, ks adapters.Keyspace) error {
	var rep takeReply
	if err := c.invoke(ctx, addr, methodTake, &takeRequest{ks: ks}, &rep); err != nil {
		return err
	}
	return rep.err.err()
}

// invoke makes one unary call to the peer at addr.
func (c *Client) invoke(ctx context.Context, addr, method string, req, rep message) error {
	cc, err := c.conn(addr)
	if err != nil {
		return err
	}
	err = cc.Invoke(c.outgoing(ctx), method, req, rep)
	c.noted(addr, err)
	if err != nil {
		c.refused(addr, err)
		return fmt.Errorf("peer %s: %w", addr, err)
	}
	return nil
}
