package blog

import (
	"context"
	"fmt"

	"github.com/nemocache/nemo/adapters"
)

// pendingPage is how many records Pending reads at a time.
const pendingPage = 500

// Pending lists the keyspaces whose logs, kept in lks (a keyspace
// Codec.Keyspace returns), hold entries: the commits their last owners
// acknowledged and nobody has written back since, perhaps because those
// owners are gone. A node that keeps its logs in the backend recovers them
// when it starts (the engine's Recover), rather than waiting for a client
// to touch each keyspace. It reads every log record in lks, entries
// included: logs are short (each checkpoint truncates them).
func Pending(ctx context.Context, o Options, lks adapters.Keyspace) ([]adapters.Keyspace, error) {
	o.EnsureDefaults()
	if o.Store == nil || o.Codec == nil {
		return nil, fmt.Errorf("blog: pending: no store or codec: %w", adapters.ErrInvalid)
	}
	start, end := o.Codec.Logs(lks)
	var fenced []adapters.Keyspace
	entries := 0
	for pos := start; ; {
		recs, more, err := o.Store.GetRange(ctx, lks, pos, end, pendingPage)
		if err != nil {
			return nil, fmt.Errorf("blog: list the logs in %q: %w", lks, err)
		}
		for _, r := range recs {
			if f, err := o.Codec.DecodeFence(r.Value); err == nil {
				if f.Keyspace != "" && f.Last > 0 {
					fenced = append(fenced, f.Keyspace)
				}
				continue
			}
			entries++
		}
		if !more || len(recs) == 0 {
			break
		}
		pos = adapters.Successor(recs[len(recs)-1].Key)
	}
	if entries == 0 {
		return nil, nil
	}
	var out []adapters.Keyspace
	for _, ks := range fenced {
		s, e := o.Codec.EntryRange(ks)
		recs, _, err := o.Store.GetRange(ctx, lks, s, e, 1)
		if err != nil {
			return nil, fmt.Errorf("blog: read the log of %q: %w", ks, err)
		}
		if len(recs) > 0 {
			out = append(out, ks)
		}
	}
	return out, nil
}
