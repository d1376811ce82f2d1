package datastore

import (
	"context"
	"fmt"

	"cloud.google.com/go/datastore/apiv1/datastorepb"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
)

var _ adapters.Pinger = (*Store)(nil)

// pingKind names the entity Ping looks up, which need not exist (a kind
// no application uses; not reserved, which a Lookup would refuse).
const pingKind = "nemo-ping"

// Ping implements adapters.Pinger: one Lookup of a key that does not exist
// in the default namespace of Options.Project and Options.Database, which
// the service authenticates and authorizes like any read. A refused
// credential (UNAUTHENTICATED, PERMISSION_DENIED) fails with
// adapters.ErrAccessDenied; a service that does not answer with
// adapters.ErrUnavailable after the adapter's retries, or with ctx's error.
// The emulators take any credential, so there Ping proves only that the
// service answers.
func (s *Store) Ping(ctx context.Context) error {
	if s.opts.Project == "" {
		return fmt.Errorf("datastore: ping: %w: no project", adapters.ErrInvalid)
	}
	p := dscodec.Partition{Project: s.opts.Project, Database: s.opts.Database}
	key := &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: p.Project, DatabaseId: p.Database},
		Path: []*datastorepb.Key_PathElement{{Kind: pingKind, IdType: &datastorepb.Key_PathElement_Name{Name: "absent"}}}}
	return s.call(routed(ctx, p), "ping", func(ctx context.Context) error {
		_, err := s.client.Lookup(ctx, &datastorepb.LookupRequest{ProjectId: p.Project, DatabaseId: p.Database, Keys: []*datastorepb.Key{key}})
		return err
	})
}

// Endpoint is where the Store sends its calls: the emulator's host:port,
// or the service's.
func (s *Store) Endpoint() string { return s.endpoint }
