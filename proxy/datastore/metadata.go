package datastore

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"cloud.google.com/go/datastore/apiv1/datastorepb"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
)

// Metadata queries: kind __namespace__ lists the namespaces of the
// request's project and database that hold entities, __kind__ the kinds of
// the query's namespace, __property__ its indexed properties with their
// representations, as the service answers them: keys only (__namespace__:
// "name", or id 1 for the default namespace; __kind__: "Kind";
// __property__: __kind__ "Kind" / __property__ "name", with a
// property_representation array of INT64, BOOLEAN, STRING, DOUBLE, POINT,
// REFERENCE, NULL), in ascending key order, with comparison filters on
// __key__ (and HAS_ANCESTOR on __property__), limits, offsets and cursors.
//
// They are answered from what the engine holds, unflushed writes included:
// namespaces from the keyspaces the buffer and the store know
// (txn.Engine.Keyspaces), each read to see it holds an entity; kinds and
// properties by reading the namespace. In front of Datastore, outside a
// transaction and with nothing unflushed in the namespace, the __kind__ or
// __property__ entities come from the backend (MetadataRunner), every
// batch of them, and nemo runs the query over them as over its own, so
// filters, limits, offsets and cursors (nemo's) behave alike either way.
// Only the legacy Datastore emulator implements metadata queries (the
// Firestore emulator refuses them), so its answers and messages are the
// reference; a refusal of the backend's, when nemo asks it, is passed on
// with the backend's code and message (storeStatus).
//
// Empty arrays have no index entry (see indexValues), so they list no
// property, where the legacy emulator lists them as NULL.

// MetadataRunner lists the entities of a metadata kind (__kind__ or
// __property__) in the namespace of a keyspace as the backend lists them,
// every batch of them: the Datastore adapter.
type MetadataRunner interface {
	MetadataEntities(ctx context.Context, ks adapters.Keyspace, kind string) ([]*datastorepb.Entity, error)
}

const (
	kindKind        = "__kind__"
	kindProperty    = "__property__"
	kindNamespace   = "__namespace__"
	kindEntityGroup = "__entity_group__"
	propertyRepr    = "property_representation"
	defaultNSID     = 1 // the id of the default namespace's __namespace__ key
)

// metadataKind returns kind when it is a metadata kind nemo answers (or
// refuses as the service does), "" otherwise. Other reserved kinds
// (__Stat_*__, ...) are plain kinds that hold nothing.
func metadataKind(kind string) string {
	switch kind {
	case kindKind, kindProperty, kindNamespace, kindEntityGroup:
		return kind
	}
	return ""
}

// checkMetadataQuery applies the service's rules on metadata queries.
func checkMetadataQuery(p dscodec.Partition, meta string, q *datastorepb.Query, filter *datastorepb.Filter) error {
	if meta == kindEntityGroup {
		return invalid("queries not supported on %s", kindEntityGroup)
	}
	for _, o := range q.GetOrder() {
		if o.GetProperty().GetName() != keyProperty || o.GetDirection() == datastorepb.PropertyOrder_DESCENDING {
			return invalid("Only ascending order on __key__ supported")
		}
	}
	for _, pr := range q.GetProjection() {
		if pr.GetProperty().GetName() != keyProperty {
			return invalid("Only comparison filters on __key__ supported")
		}
	}
	if len(q.GetDistinctOn()) > 0 {
		return invalid("Only comparison filters on __key__ supported")
	}
	if filter == nil {
		return nil
	}
	var err error
	walkFilters(filter, func(f *datastorepb.Filter) {
		if err != nil {
			return
		}
		if cf := f.GetCompositeFilter(); cf != nil {
			if cf.GetOp() != datastorepb.CompositeFilter_AND {
				err = invalid("unsupported composite property operator")
			}
			return
		}
		pf := f.GetPropertyFilter()
		switch {
		case pf.GetProperty().GetName() != keyProperty,
			pf.GetOp() == datastorepb.PropertyFilter_NOT_EQUAL, pf.GetOp() == datastorepb.PropertyFilter_NOT_IN:
			err = invalid("Only comparison filters on __key__ supported")
			return
		case pf.GetOp() == datastorepb.PropertyFilter_HAS_ANCESTOR && meta != kindProperty:
			err = invalid("ancestor queries on %s not allowed", meta)
			return
		}
		keys := []*datastorepb.Value{pf.GetValue()}
		if arr := pf.GetValue().GetArrayValue(); arr != nil {
			keys = arr.GetValues()
		}
		for _, k := range keys {
			if err = checkMetadataKey(p, meta, k.GetKeyValue()); err != nil {
				return
			}
		}
	})
	return err
}

// checkMetadataKey checks a key a metadata query compares with.
func checkMetadataKey(p dscodec.Partition, meta string, k *datastorepb.Key) error {
	path := k.GetPath()
	why := ""
	switch meta {
	case kindKind:
		switch {
		case len(path) > 1:
			why = "key has parent"
		case path[0].GetKind() != kindKind:
			why = "must be a named key for __kind__"
		}
	case kindProperty:
		switch {
		case len(path) > 2 || (len(path) == 2 && path[0].GetKind() != kindKind):
			why = "must have no parent or __kind__ parent"
		case len(path) == 2 && path[1].GetKind() != kindProperty:
			why = "must be named key for __property__"
		case len(path) == 1 && path[0].GetKind() != kindKind:
			why = "parent must be a named key for __kind__"
		}
	case kindNamespace:
		if len(path) > 1 || path[0].GetKind() != kindNamespace {
			why = "must be a key for __namespace__"
		}
	}
	if why == "" {
		return nil
	}
	return invalid("Key filter on %s is invalid (%s) - received %s", meta, why, legacyKeyText(p, path))
}

// legacyKeyText renders a key as the service's metadata messages do (the
// text of its legacy Reference).
func legacyKeyText(p dscodec.Partition, path []*datastorepb.Key_PathElement) string {
	var b strings.Builder
	fmt.Fprintf(&b, "app: %s\n", strconv.Quote(p.Project))
	if p.Namespace != "" {
		fmt.Fprintf(&b, "name_space: %s\n", strconv.Quote(p.Namespace))
	}
	b.WriteString("path <\n")
	for _, e := range path {
		fmt.Fprintf(&b, "  Element {\n    type: %s\n", strconv.Quote(e.GetKind()))
		switch x := e.GetIdType().(type) {
		case *datastorepb.Key_PathElement_Name:
			fmt.Fprintf(&b, "    name: %s\n", strconv.Quote(x.Name))
		case *datastorepb.Key_PathElement_Id:
			fmt.Fprintf(&b, "    id: %d\n", x.Id)
		}
		b.WriteString("  }\n")
	}
	b.WriteString(">\n")
	return b.String()
}

// passMetadata reports whether a metadata query's entities can come from
// the backend: the backend lists them, the query is not in a transaction (nemo
// could not lock what the backend reads), and the buffer holds nothing the
// backend has not seen in the namespace. Namespace queries are always
// answered here (from the keyspaces, each read once).
func (f *Frontend) passMetadata(pl *plan, s *session) (bool, error) {
	if f.opts.Metadata == nil || s != nil || pl.meta == kindNamespace {
		return false, nil
	}
	dirty, err := f.engine.Unflushed(pl.ks, func([]byte) bool { return true })
	return !dirty, err
}

// metadataScanner returns a scanFunc over the metadata query's virtual
// entities, computed from what scan reads.
func (f *Frontend) metadataScanner(ctx context.Context, pl *plan, scan scanFunc) (scanFunc, error) {
	var ents []*datastorepb.Entity
	var err error
	switch pl.meta {
	case kindNamespace:
		ents, err = f.namespaceEntities(ctx, pl.p, scan)
	case kindKind:
		ents, err = kindEntities(ctx, pl, scan)
	case kindProperty:
		ents, err = propertyEntities(ctx, pl, scan)
	}
	if err != nil {
		return nil, err
	}
	return entityScanner(ents)
}

// entityScanner serves the (virtual) entities of a metadata query in key
// order.
func entityScanner(ents []*datastorepb.Entity) (scanFunc, error) {
	recs := make([]adapters.Record, 0, len(ents))
	for _, e := range ents {
		k, err := dscodec.EncodeKey(e.GetKey())
		if err != nil {
			return nil, err
		}
		v, err := dscodec.EncodeValue(&datastorepb.EntityResult{Entity: e})
		if err != nil {
			return nil, err
		}
		recs = append(recs, adapters.Record{Key: k, Value: v})
	}
	sort.Slice(recs, func(i, j int) bool { return bytes.Compare(recs[i].Key, recs[j].Key) < 0 })
	return sliceScanner(recs), nil
}

// sliceScanner serves [start, end) from records in key order.
func sliceScanner(recs []adapters.Record) scanFunc {
	return func(_ context.Context, _ adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, []byte, error) {
		i := sort.Search(len(recs), func(i int) bool { return bytes.Compare(recs[i].Key, start) >= 0 })
		var out []adapters.Record
		for ; i < len(recs) && (end == nil || bytes.Compare(recs[i].Key, end) < 0); i++ {
			if limit > 0 && len(out) == limit {
				return out, recs[i].Key, nil
			}
			out = append(out, recs[i])
		}
		return out, nil, nil
	}
}

func metaKey(p dscodec.Partition, path ...*datastorepb.Key_PathElement) *datastorepb.Key {
	return &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: p.Project, DatabaseId: p.Database, NamespaceId: p.Namespace}, Path: path}
}

func named(kind, name string) *datastorepb.Key_PathElement {
	return &datastorepb.Key_PathElement{Kind: kind, IdType: &datastorepb.Key_PathElement_Name{Name: name}}
}

// namespaceEntities: one per namespace of the query's project and database
// that holds an entity.
func (f *Frontend) namespaceEntities(ctx context.Context, p dscodec.Partition, scan scanFunc) ([]*datastorepb.Entity, error) {
	prefix := dscodec.Partition{Project: p.Project, Database: p.Database}.Keyspace()
	kss, err := f.engine.Keyspaces(ctx, string(prefix))
	if err != nil {
		return nil, toStatus(err)
	}
	var out []*datastorepb.Entity
	for _, ks := range kss {
		ns, err := dscodec.ParseKeyspace(ks)
		if err != nil || ns.Project != p.Project || ns.Database != p.Database {
			continue
		}
		recs, _, err := scan(ctx, ks, nil, nil, 1)
		if err != nil {
			return nil, toStatus(err)
		}
		if len(recs) == 0 {
			continue
		}
		el := named(kindNamespace, ns.Namespace)
		if ns.Namespace == "" {
			el = &datastorepb.Key_PathElement{Kind: kindNamespace, IdType: &datastorepb.Key_PathElement_Id{Id: defaultNSID}}
		}
		out = append(out, &datastorepb.Entity{Key: metaKey(p, el)})
	}
	return out, nil
}

// eachEntity calls fn with the key path, and with decode the entity, of
// every record of the query's namespace.
func eachEntity(ctx context.Context, pl *plan, scan scanFunc, decode bool, fn func(path []*datastorepb.Key_PathElement, e *datastorepb.Entity)) error {
	var start []byte
	for {
		recs, next, err := scan(ctx, pl.ks, start, nil, scanPage)
		if err != nil {
			return toStatus(err)
		}
		for _, rec := range recs {
			path, err := dscodec.DecodePath(rec.Key)
			if err != nil || len(path) == 0 || reserved.MatchString(path[len(path)-1].GetKind()) {
				continue
			}
			var e *datastorepb.Entity
			if decode {
				res, err := dscodec.DecodeValue(rec.Value)
				if err != nil {
					return err
				}
				e = res.GetEntity()
			}
			fn(path, e)
		}
		if next == nil {
			return nil
		}
		start = next
	}
}

// kindEntities: one per kind of the namespace.
func kindEntities(ctx context.Context, pl *plan, scan scanFunc) ([]*datastorepb.Entity, error) {
	kinds := map[string]bool{}
	err := eachEntity(ctx, pl, scan, false, func(path []*datastorepb.Key_PathElement, _ *datastorepb.Entity) {
		kinds[path[len(path)-1].GetKind()] = true
	})
	if err != nil {
		return nil, err
	}
	var out []*datastorepb.Entity
	for kind := range kinds {
		out = append(out, &datastorepb.Entity{Key: metaKey(pl.p, named(kindKind, kind))})
	}
	return out, nil
}

// propertyEntities: one per kind and indexed property of the namespace,
// with the representations of its indexed values, in name order.
func propertyEntities(ctx context.Context, pl *plan, scan scanFunc) ([]*datastorepb.Entity, error) {
	type kindProp struct{ kind, prop string }
	reprs := map[kindProp]map[string]bool{}
	err := eachEntity(ctx, pl, scan, true, func(path []*datastorepb.Key_PathElement, e *datastorepb.Entity) {
		kind := path[len(path)-1].GetKind()
		indexedProperties(e, "", func(name string, v *datastorepb.Value) {
			kp := kindProp{kind, name}
			if reprs[kp] == nil {
				reprs[kp] = map[string]bool{}
			}
			reprs[kp][representation(v)] = true
		})
	})
	if err != nil {
		return nil, err
	}
	var out []*datastorepb.Entity
	for kp, set := range reprs {
		var vals []*datastorepb.Value
		for _, r := range slices.Sorted(maps.Keys(set)) {
			vals = append(vals, &datastorepb.Value{ValueType: &datastorepb.Value_StringValue{StringValue: r}})
		}
		out = append(out, &datastorepb.Entity{
			Key:        metaKey(pl.p, named(kindKind, kp.kind), named(kindProperty, kp.prop)),
			Properties: map[string]*datastorepb.Value{propertyRepr: {ValueType: &datastorepb.Value_ArrayValue{ArrayValue: &datastorepb.ArrayValue{Values: vals}}}},
		})
	}
	return out, nil
}

// indexedProperties calls fn with every indexed value of e, named as the
// index names it (embedded entities' properties as outer.inner); entity
// values themselves, empty arrays and excluded values have no entry.
func indexedProperties(e *datastorepb.Entity, prefix string, fn func(name string, v *datastorepb.Value)) {
	for name, v := range e.GetProperties() {
		vals := []*datastorepb.Value{v}
		if arr := v.GetArrayValue(); arr != nil {
			if v.GetExcludeFromIndexes() {
				continue // a vector
			}
			vals = arr.GetValues()
		}
		for _, x := range vals {
			if sub := x.GetEntityValue(); sub != nil {
				indexedProperties(sub, prefix+name+".", fn)
				continue
			}
			if !x.GetExcludeFromIndexes() {
				fn(prefix+name, x)
			}
		}
	}
}

// representation is a value's property_representation.
func representation(v *datastorepb.Value) string {
	switch v.GetValueType().(type) {
	case *datastorepb.Value_IntegerValue, *datastorepb.Value_TimestampValue:
		return "INT64"
	case *datastorepb.Value_BooleanValue:
		return "BOOLEAN"
	case *datastorepb.Value_StringValue, *datastorepb.Value_BlobValue:
		return "STRING"
	case *datastorepb.Value_DoubleValue:
		return "DOUBLE"
	case *datastorepb.Value_GeoPointValue:
		return "POINT"
	case *datastorepb.Value_KeyValue:
		return "REFERENCE"
	}
	return "NULL"
}
