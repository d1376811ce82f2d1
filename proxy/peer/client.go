package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/txn"
	"github.com/nemocache/nemo/txn/lease"
)

// Owners is what the router needs of the lease manager.
type Owners interface {
	Owner(ctx context.Context, ks adapters.Keyspace) (lease.Owner, error)
	Invalidate(ks adapters.Keyspace)
}

// Options configure a Client.
type Options struct {
	// Owners tells who owns a keyspace (the node's lease manager).
	Owners Owners
	// Leased says whether a keyspace has a lease (the lease codec has a
	// place for it); one without runs on every node.
	Leased func(ks adapters.Keyspace) bool
	// Self is this node's own peer address (coherence.advertise).
	Self string
	// Secret is presented to every peer (coherence.peer_secret).
	Secret string
	Logger *slog.Logger
}

// Client is a node's side of the peer API: the engine's txn.Router and
// the buffer's cache.Options.Source.
type Client struct {
	opts    Options
	mu      sync.Mutex // guards conns, warned and failing; a leaf
	conns   map[string]*grpc.ClientConn
	warned  map[string]time.Time // when a refusal by each peer was last logged
	failing map[string]failing   // peers whose last calls failed to reach them
	moved   atomic.Uint64        // keyspaces handed over by a rebalance and taken (Moved)
}

// failing is a peer the calls of this node have failed to reach, without
// a success since: since the first failure, until the last.
type failing struct{ since, last time.Time }

// noted records the outcome of a call to addr for Unreachable: err nil,
// or not one of reaching the peer (a refusal it answered), clears it.
func (c *Client) noted(addr string, err error) {
	c.reached(addr, err == nil || status.Code(err) != codes.Unavailable)
}

// reached records whether a call reached the peer at addr.
func (c *Client) reached(addr string, ok bool) {
	reach := !ok
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	f, was := c.failing[addr]
	switch {
	case !reach:
		delete(c.failing, addr)
	case !was:
		c.failing[addr] = failing{since: now, last: now}
	default:
		f.last = now
		c.failing[addr] = f
	}
}

// Unreachable names a peer this node has failed to reach for longer than
// after, with every call to it failing and the last one less than recent
// ago, or "". Calls go only to the holders of live leases, and a dead
// holder's lease passes within a TTL (its tables route elsewhere then):
// with after past the TTL, such a peer is alive and this node is cut off
// from it, so it cannot serve the writes of the tables that peer owns.
func (c *Client) Unreachable(after, recent time.Duration) (addr string, since time.Time) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for a, f := range c.failing {
		if now.Sub(f.last) > recent {
			delete(c.failing, a) // no call tried it lately: the route moved on
			continue
		}
		if now.Sub(f.since) > after && (addr == "" || f.since.Before(since)) {
			addr, since = a, f.since
		}
	}
	return addr, since
}

// warnEvery spaces the log lines about one peer refusing this node.
const warnEvery = time.Minute

// refused logs, at most once per warnEvery and peer, that the peer at
// addr refused this node's secret: replicas configured with different
// coherence.peer_secret cannot forward to each other.
func (c *Client) refused(addr string, err error) {
	if status.Code(err) != codes.Unauthenticated {
		return
	}
	c.mu.Lock()
	now := time.Now()
	skip := now.Sub(c.warned[addr]) < warnEvery
	if !skip {
		c.warned[addr] = now
	}
	c.mu.Unlock()
	if !skip {
		c.opts.Logger.Warn("a replica refused this nemo's peer secret: writes of the tables it owns fail until coherence.peer_secret is the same on every replica",
			"peer", addr, "err", status.Convert(err).Message())
	}
}

// NewClient returns a client; Close closes its connections.
func NewClient(opts Options) *Client {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Client{opts: opts, conns: map[string]*grpc.ClientConn{}, warned: map[string]time.Time{}, failing: map[string]failing{}}
}

// Close closes every connection to a peer.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for addr, cc := range c.conns {
		errs = append(errs, cc.Close())
		delete(c.conns, addr)
	}
	return errors.Join(errs...)
}

// Route implements txn.Router: from the lease record of ks.
func (c *Client) Route(ctx context.Context, ks adapters.Keyspace) (txn.Route, error) {
	if !c.opts.Leased(ks) {
		return txn.Route{}, nil
	}
	o, err := c.opts.Owners.Owner(ctx, ks)
	switch {
	case errors.Is(err, lease.ErrLost):
		// Ours, lapsed: running here, Hold refuses it.
		return txn.Route{Leased: true, Held: true}, nil
	case err != nil:
		return txn.Route{}, err
	case o.Self:
		return txn.Route{Leased: true, Held: true}, nil
	case o.Live && o.Addr != "" && o.Addr != c.opts.Self:
		return txn.Route{Leased: true, Peer: o.Addr}, nil
	case o.Live:
		// A holder without a peer listener (coherence exclusive), or
		// a former run of a node at this address: Hold refuses it.
		return txn.Route{Leased: true}, nil
	}
	return txn.Route{Leased: true, Orphaned: o.Holder != ""}, nil
}

// Invalidate implements txn.Router.
func (c *Client) Invalidate(ks adapters.Keyspace) { c.opts.Owners.Invalidate(ks) }

// conn returns the connection to addr, dialled on first use.
func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc := c.conns[addr]; cc != nil {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(codec{}), grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)))
	if err != nil {
		return nil, err
	}
	c.conns[addr] = cc
	return cc, nil
}

func (c *Client) outgoing(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, secretHeader, c.opts.Secret)
}

// Open implements txn.Router: a stream on addr carrying one transaction.
// The begin message is sent with the first operation's, without a round
// trip of its own.
func (c *Client) Open(ctx context.Context, addr string, readOnly bool) (txn.Remote, error) {
	cc, err := c.conn(addr)
	if err != nil {
		return nil, err
	}
	// The stream outlives ctx (it carries the whole transaction), but
	// its opening does not: a peer that cannot be reached in the
	// caller's time (a black-holed address) fails the call.
	sctx, cancel := context.WithCancel(c.outgoing(context.WithoutCancel(ctx)))
	stop := context.AfterFunc(ctx, cancel)
	st, err := cc.NewStream(sctx, &grpc.StreamDesc{StreamName: "Txn", ServerStreams: true, ClientStreams: true}, methodTxn)
	stopped := stop()
	if err == nil && !stopped {
		err = ctx.Err() // ctx ended as the stream opened: it is cancelled
	}
	if err != nil {
		cancel()
		c.reached(addr, false) // not even a stream: unreachable
		return nil, err
	}
	r := &remote{c: c, st: st, cancel: cancel, addr: addr}
	if err := st.SendMsg(&request{readOnly: readOnly}); err != nil && !errors.Is(err, io.EOF) {
		r.Close()
		c.noted(addr, err)
		return nil, err
	}
	return r, nil
}

// remote is one transaction's stream to its owner.
type remote struct {
	c      *Client
	st     grpc.ClientStream
	cancel context.CancelFunc
	addr   string
	broken error // the stream failed: the remote transaction is gone
}

// Do implements txn.Remote. If the stream fails the remote transaction is
// gone (the owner aborts it): the operation fails with
// txn.ErrOwnerUnavailable and txn.ErrAborted, and a commit whose answer
// is lost with adapters.ErrUnknownOutcome.
func (r *remote) Do(ctx context.Context, op txn.Op) (txn.Result, error) {
	if r.broken != nil {
		return txn.Result{}, r.broken
	}
	req := request{op: op}
	if d, ok := ctx.Deadline(); ok {
		req.deadline = d.UnixNano()
	}
	stop := context.AfterFunc(ctx, r.cancel) // a caller that gives up ends the transaction
	defer stop()
	var rep reply
	err := r.st.SendMsg(&req)
	if err == nil || errors.Is(err, io.EOF) {
		// A send that failed says io.EOF: the stream's status comes
		// with the receive.
		err = r.st.RecvMsg(&rep)
	}
	r.c.noted(r.addr, err)
	if err != nil {
		r.cancel()
		r.c.refused(r.addr, err)
		if cerr := ctx.Err(); cerr != nil {
			err = cerr
		}
		r.broken = fmt.Errorf("%w: %w: %s: %w", txn.ErrOwnerUnavailable, txn.ErrAborted, r.addr, err)
		if op.Kind == txn.OpCommit {
			return txn.Result{}, fmt.Errorf("%w: the commit was sent to %s, whose answer was lost: %w", adapters.ErrUnknownOutcome, r.addr, err)
		}
		return txn.Result{}, r.broken
	}
	return rep.res, rep.err.err()
}

// Close implements txn.Remote.
func (r *remote) Close() {
	_ = r.st.CloseSend()
	r.cancel()
}

// Source is the buffer's cache.Options.Source: a keyspace another node
// owns is read from that node.
func (c *Client) Source(ctx context.Context, ks adapters.Keyspace) (cache.Reader, error) {
	r, err := c.Route(ctx, ks)
	if err != nil || r.Peer == "" {
		return nil, err
	}
	return &reader{c: c, addr: r.Peer}, nil
}

// reader reads a keyspace from its owner's engine.
type reader struct {
	c    *Client
	addr string
}

func (r *reader) Get(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([]adapters.Record, error) {
	rep, err := r.read(ctx, &readRequest{ks: ks, keys: keys})
	if err != nil {
		return nil, err
	}
	if len(rep.recs) != len(keys) {
		return nil, fmt.Errorf("%w: peer %s answered %d records for %d keys", adapters.ErrUnavailable, r.addr, len(rep.recs), len(keys))
	}
	return rep.recs, nil
}

func (r *reader) GetRange(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, bool, error) {
	rep, err := r.read(ctx, &readRequest{ks: ks, rangeRead: true, start: start, end: end, limit: limit})
	if err != nil {
		return nil, false, err
	}
	return rep.recs, rep.more && len(rep.recs) > 0, nil
}

// read sends one read to the owner. A peer that no longer owns the
// keyspace makes the router forget it, and the read fails with
// cache.ErrSourceMoved: the buffer routes it again, once (a stale route
// costs one lease read). Should the new route be stale too, it fails as
// the store's would (adapters.ErrUnavailable), retryable.
func (r *reader) read(ctx context.Context, req *readRequest) (*readReply, error) {
	cc, err := r.c.conn(r.addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", adapters.ErrUnavailable, err)
	}
	var rep readReply
	err = cc.Invoke(r.c.outgoing(ctx), methodRead, req, &rep)
	r.c.noted(r.addr, err)
	if err != nil {
		r.c.refused(r.addr, err)
		return nil, fmt.Errorf("%w: %w: reading %q from its owner %s: %w", adapters.ErrUnavailable, txn.ErrOwnerUnavailable, req.ks, r.addr, err)
	}
	if err := rep.err.err(); err != nil {
		if errors.Is(err, txn.ErrNotOwner) {
			r.c.Invalidate(req.ks)
			return nil, fmt.Errorf("%w: %w: %w", adapters.ErrUnavailable, cache.ErrSourceMoved, err)
		}
		return nil, err
	}
	return &rep, nil
}
