package datastore

import (
	"context"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
)

// idKeys normalizes and checks the keys of an AllocateIds (allocate: every
// key incomplete) or ReserveIds (every key complete) request.
func idKeys(project, database string, in []*datastorepb.Key, allocate bool) ([]*datastorepb.Key, error) {
	keys := make([]*datastorepb.Key, len(in))
	for i, k := range in {
		nk, _, err := normKey(project, database, k)
		if err != nil {
			return nil, err
		}
		if err := checkPath(nk, allocate, true); err != nil {
			return nil, err
		}
		if allocate && !incomplete(nk) {
			return nil, invalid("The key path must be incomplete to allocate an id.")
		}
		keys[i] = nk
	}
	return keys, nil
}

// AllocateIds implements datastorepb.DatastoreServer.
func (f *Frontend) AllocateIds(ctx context.Context, req *datastorepb.AllocateIdsRequest) (*datastorepb.AllocateIdsResponse, error) {
	if err := f.checkProject(req.GetProjectId()); err != nil {
		return nil, err
	}
	keys, err := idKeys(req.GetProjectId(), req.GetDatabaseId(), req.GetKeys(), true)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return &datastorepb.AllocateIdsResponse{}, nil
	}
	out, err := f.alloc.AllocateIDs(ctx, req.GetProjectId(), req.GetDatabaseId(), keys)
	if err != nil {
		return nil, toStatus(err)
	}
	return &datastorepb.AllocateIdsResponse{Keys: out}, nil
}

// ReserveIds implements datastorepb.DatastoreServer.
func (f *Frontend) ReserveIds(ctx context.Context, req *datastorepb.ReserveIdsRequest) (*datastorepb.ReserveIdsResponse, error) {
	if err := f.checkProject(req.GetProjectId()); err != nil {
		return nil, err
	}
	keys, err := idKeys(req.GetProjectId(), req.GetDatabaseId(), req.GetKeys(), false)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return &datastorepb.ReserveIdsResponse{}, nil
	}
	if err := f.alloc.ReserveIDs(ctx, req.GetProjectId(), req.GetDatabaseId(), keys); err != nil {
		return nil, toStatus(err)
	}
	return &datastorepb.ReserveIdsResponse{}, nil
}
