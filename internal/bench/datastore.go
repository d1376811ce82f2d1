package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"cloud.google.com/go/datastore"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nemocache/nemo/adapters"
	dsstore "github.com/nemocache/nemo/adapters/datastore"
	"github.com/nemocache/nemo/cache"
	dsfront "github.com/nemocache/nemo/proxy/datastore"
	"github.com/nemocache/nemo/txn"
)

// dsKind is the kind of the emulator target's entities; an item's key is
// a name key, its name the item's key.
const dsKind = "usertable"

// dsEntity is an item as the Go client stores it: the value unindexed
// (an indexed string is limited to 1500 bytes).
type dsEntity struct {
	V string `datastore:"v,noindex"`
}

// datastoreData is the cache experiments' items loaded into a fresh
// project of the Datastore emulator, and nemo's Datastore store adapter
// over it, behind the request counters. Every run opens a fresh buffer
// and engine with nemo's Datastore frontend (gRPC) over them, in
// process, and reads through the Go Datastore client.
type datastoreData struct {
	project string
	direct  *datastore.Client // to the emulator itself: loading and cleanup
	store   *dsstore.Store
	counted *adapters.Counted
	n       uint64
	vsz     int
	log     *slog.Logger
}

// dsClient is a Go Datastore client of the emulator or frontend at addr,
// over plaintext gRPC as DATASTORE_EMULATOR_HOST sets it up.
func dsClient(ctx context.Context, addr, project string) (*datastore.Client, error) {
	return datastore.NewClient(ctx, project,
		option.WithEndpoint("passthrough:///"+addr),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
}

func dsKey(key []byte) *datastore.Key { return datastore.NameKey(dsKind, string(key), nil) }

func newDatastoreData(ctx context.Context, o Options) (*datastoreData, error) {
	d := &datastoreData{n: uint64(o.Scale.Records), vsz: o.Scale.ValueSize, log: o.Logger,
		project: fmt.Sprintf("nemo-bench-%x", time.Now().UnixNano()&0xffffffffff)}
	var err error
	if d.direct, err = dsClient(ctx, o.EmulatorHost, d.project); err != nil {
		return nil, err
	}
	if err := d.load(ctx); err != nil {
		return nil, errors.Join(err, d.close())
	}
	if d.store, err = dsstore.Open(ctx, dsstore.Options{EmulatorHost: o.EmulatorHost, Logger: o.Logger}); err != nil {
		return nil, errors.Join(err, d.close())
	}
	d.counted = adapters.Count(d.store)
	return d, nil
}

// load writes the items straight into the emulator, 500 per call.
func (d *datastoreData) load(ctx context.Context) error {
	var keys []*datastore.Key
	var ents []*dsEntity
	for i := range d.n {
		k := itemKey(i)
		keys = append(keys, dsKey(k))
		ents = append(ents, &dsEntity{V: string(valueFor(k, d.vsz))})
		if len(keys) == 500 || i == d.n-1 {
			if _, err := d.direct.PutMulti(ctx, keys, ents); err != nil {
				return fmt.Errorf("load: %w", err)
			}
			keys, ents = keys[:0], ents[:0]
		}
	}
	return nil
}

// close deletes the items and closes the clients.
func (d *datastoreData) close() error {
	var errs []error
	ctx := context.Background()
	for i := uint64(0); i < d.n; i += 500 {
		var keys []*datastore.Key
		for j := i; j < min(i+500, d.n); j++ {
			keys = append(keys, dsKey(itemKey(j)))
		}
		if err := d.direct.DeleteMulti(ctx, keys); err != nil {
			errs = append(errs, err)
			break
		}
	}
	errs = append(errs, d.direct.Close())
	if d.store != nil {
		errs = append(errs, d.store.Close())
	}
	return errors.Join(errs...)
}

func (d *datastoreData) items() uint64  { return d.n }
func (d *datastoreData) valueSize() int { return d.vsz }

func (d *datastoreData) open(ctx context.Context, p cache.Policy, maxBytes int64) (cacheStack, error) {
	e, err := newEngine(d.counted, p, maxBytes, txn.Options{}, d.log)
	if err != nil {
		return nil, err
	}
	f, err := dsfront.New(e.eng, dsfront.Options{Project: d.project, Allocator: d.store, Metadata: d.store, Logger: d.log})
	if err != nil {
		return nil, errors.Join(err, e.close())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, errors.Join(err, e.close())
	}
	srv := f.GRPCServer()
	go srv.Serve(ln)
	c, err := dsClient(ctx, ln.Addr().String(), d.project)
	if err != nil {
		srv.Stop()
		return nil, errors.Join(err, e.close())
	}
	return &datastoreStack{engine: e, srv: srv, client: c}, nil
}

// datastoreStack is a cacheStack on the emulator target: the Go client
// talking gRPC to nemo's frontend.
type datastoreStack struct {
	*engine
	srv    *grpc.Server
	client *datastore.Client
	once   sync.Once
}

func (s *datastoreStack) warming(bool) {} // a real backend's latency is what it is

func (s *datastoreStack) close() error {
	var err error
	s.once.Do(func() {
		err = s.client.Close()
		s.srv.Stop()
		err = errors.Join(err, s.engine.close())
	})
	return err
}

func (s *datastoreStack) get(ctx context.Context, key []byte) (int, bool, error) {
	var ent dsEntity
	err := s.client.Get(ctx, dsKey(key), &ent)
	if errors.Is(err, datastore.ErrNoSuchEntity) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return len(ent.V), true, nil
}

// scan is a kind query with __key__ bounds and a limit, as an
// application reads a key range.
func (s *datastoreStack) scan(ctx context.Context, start, end []byte, limit int) ([][]byte, error) {
	q := datastore.NewQuery(dsKind).
		FilterField("__key__", ">=", dsKey(start)).
		FilterField("__key__", "<", dsKey(end)).
		Limit(limit)
	var keys [][]byte
	it := s.client.Run(ctx, q)
	for {
		var ent dsEntity
		k, err := it.Next(&ent)
		if errors.Is(err, iterator.Done) {
			return keys, nil
		}
		if err != nil {
			return nil, err
		}
		keys = append(keys, []byte(k.Name))
	}
}
