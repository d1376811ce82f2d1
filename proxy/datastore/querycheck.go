package datastore

import (
	"slices"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/protobuf/proto"

	"github.com/nemocache/nemo/adapters/datastore/dscodec"
)

// Query validation: nemo refuses what the service refuses, with its code
// (INVALID_ARGUMENT) and message. The reference is the two emulators
// (TestInvalidQueriesAsTheEmulators). Where they disagree nemo follows the
// Firestore emulator in Datastore mode, which runs the query engine
// production Datastore now runs on, and says why next to the rule:
//
//   - several inequality properties in one query, and orders that do not
//     start with the inequality property, are accepted (the legacy
//     Datastore emulator refuses both: "Only one inequality filter per
//     query is supported", "The first sort property must be the same as
//     the property to which the inequality filter is applied");
//   - an order may not name a property twice (the legacy emulator takes
//     it);
//   - IN, NOT_IN, != and OR are checked as Firestore checks them (the
//     legacy emulator implements none of them);
//   - a kindless query may project and group (the legacy emulator refuses
//     both as "kind is required for non-__key__ filters");
//   - messages the two spell differently are Firestore's spelling
//     ("Cannot project a property multiple times." against "cannot
//     project a property multiple times").

// Limits on IN and NOT_IN values and on disjunctions (Firestore's).
const (
	maxIn           = 30
	maxNotIn        = 10
	maxDisjunctions = 30
)

// checkDisjunctions refuses a filter whose disjunctive normal form has
// more than maxDisjunctions disjuncts (an IN counts one per value), as
// Firestore does; like Firestore it gives up with a shorter message as
// soon as a product of two parts exceeds twice the limit.
func checkDisjunctions(f *datastorepb.Filter) error {
	var size func(f *datastorepb.Filter) (int, bool)
	size = func(f *datastorepb.Filter) (int, bool) {
		if pf := f.GetPropertyFilter(); pf != nil {
			if pf.GetOp() == datastorepb.PropertyFilter_IN {
				return len(pf.GetValue().GetArrayValue().GetValues()), true
			}
			return 1, true
		}
		cf := f.GetCompositeFilter()
		n := 0
		if cf.GetOp() == datastorepb.CompositeFilter_OR {
			for _, sub := range cf.GetFilters() {
				m, ok := size(sub)
				if !ok {
					return 0, false
				}
				n += m
			}
			return n, true
		}
		n = 1
		for _, sub := range cf.GetFilters() {
			m, ok := size(sub)
			if !ok || n*m > 2*maxDisjunctions {
				return 0, false
			}
			n *= m
		}
		return n, true
	}
	n, ok := size(f)
	if !ok {
		return invalid("Too many disjunctions after normalization, the maximum is %d", maxDisjunctions)
	}
	if n > maxDisjunctions {
		return invalid("Too many disjunctions after normalization. Result had %d disjunctions which is more than the maximum of %d", n, maxDisjunctions)
	}
	return nil
}

// checkQueryShape applies the rules on a query's projection, orders and
// distinct-on, and those that relate its filters to the rest of the query.
// Filters themselves are checked by normFilter. The steps run in a fixed
// order, which decides the error a query with several faults gets: the
// filter's shape, the projection, the orders, the distinct-on, a repeated
// order, then offset and limit. The service's order differs for some
// pairs of faults (it checks limit before offset, and both before the
// clauses).
func checkQueryShape(q *datastorepb.Query, kind string, filter *datastorepb.Filter) error {
	var eqProps []string
	if filter != nil {
		var err error
		if eqProps, err = checkFilterShape(filter, kind); err != nil {
			return err
		}
	}
	if err := checkProjection(q.GetProjection(), eqProps); err != nil {
		return err
	}
	orders, err := checkOrders(q.GetOrder(), kind)
	if err != nil {
		return err
	}
	if err := checkDistinctOn(q.GetDistinctOn(), orders); err != nil {
		return err
	}
	for i, name := range orders {
		if slices.Contains(orders[:i], name) {
			// Firestore's rule; the legacy emulator takes the repeat.
			return invalid("order by clause cannot contain duplicate fields %s", name)
		}
	}
	if q.GetOffset() < 0 {
		return invalid("Offset must be non-negative.")
	}
	if q.GetLimit() != nil && q.GetLimit().GetValue() < 0 {
		return invalid("Limit must be non-negative.")
	}
	return nil
}

// checkFilterShape applies the rules on a filter as a whole: its number of
// disjunctions, a single != or NOT_IN, NOT_IN apart from IN and OR, and,
// in a kindless query, filters on __key__ only. It returns the properties
// with an equality filter (= or IN) anywhere in it.
func checkFilterShape(filter *datastorepb.Filter, kind string) (eqProps []string, err error) {
	if err := checkDisjunctions(filter); err != nil {
		return nil, err
	}
	notEq, in, or := 0, false, false
	walkFilters(filter, func(f *datastorepb.Filter) {
		if cf := f.GetCompositeFilter(); cf != nil {
			or = or || cf.GetOp() == datastorepb.CompositeFilter_OR
			return
		}
		pf := f.GetPropertyFilter()
		switch pf.GetOp() {
		case datastorepb.PropertyFilter_EQUAL:
			eqProps = append(eqProps, pf.GetProperty().GetName())
		case datastorepb.PropertyFilter_IN:
			eqProps = append(eqProps, pf.GetProperty().GetName())
			in = true
		case datastorepb.PropertyFilter_NOT_EQUAL, datastorepb.PropertyFilter_NOT_IN:
			notEq++
		}
	})
	if notEq > 1 {
		return nil, invalid("Only a single 'NOT_EQUAL' or 'NOT_IN' is allowed per query.")
	}
	if notEq == 1 && (in || or) && hasOp(filter, datastorepb.PropertyFilter_NOT_IN) {
		return nil, invalid("'NOT_IN' cannot be used in the same query with 'IN' or 'OR'.")
	}
	if kind == "" {
		if name := firstNonKeyFilter(filter); name != "" {
			return nil, invalid("kind is required for filter: %s", name)
		}
	}
	return eqProps, nil
}

// firstNonKeyFilter returns the property of the first property filter in
// f (depth first) that is not on __key__, or "" if there is none.
func firstNonKeyFilter(f *datastorepb.Filter) string {
	var bad string
	walkFilters(f, func(f *datastorepb.Filter) {
		if name := f.GetPropertyFilter().GetProperty().GetName(); f.GetPropertyFilter() != nil && name != keyProperty && bad == "" {
			bad = name
		}
	})
	return bad
}

// checkProjection applies the rules on the projected properties (named,
// not reserved, each once; __key__ may repeat), then refuses a projected
// property with an equality filter (eqProps).
func checkProjection(projection []*datastorepb.Projection, eqProps []string) error {
	var proj []string
	for _, pr := range projection {
		name := pr.GetProperty().GetName()
		switch {
		case name == "":
			return invalid("The property.name is the empty string.")
		case name == keyProperty:
			continue // __key__ may be projected more than once
		case reserved.MatchString(name):
			return invalid("projections are not supported for the property: %s", name)
		case slices.Contains(proj, name):
			return invalid("Cannot project a property multiple times.")
		}
		proj = append(proj, name)
	}
	for _, name := range proj {
		if slices.Contains(eqProps, name) {
			return invalid("Cannot use projection on a property with an equality filter.")
		}
	}
	return nil
}

// checkOrders applies the rules on each order in turn (a named property;
// in a kindless query, __key__ ascending only) and returns the ordered
// properties. Repeats are checked later, after distinct-on.
func checkOrders(order []*datastorepb.PropertyOrder, kind string) ([]string, error) {
	var orders []string
	for _, o := range order {
		name := o.GetProperty().GetName()
		if name == "" {
			return nil, invalid("The property.name is the empty string.")
		}
		orders = append(orders, name)
		if kind == "" && (name != keyProperty || o.GetDirection() == datastorepb.PropertyOrder_DESCENDING) {
			return nil, invalid("kind is required for all orders except __key__ ascending")
		}
	}
	return orders, nil
}

// checkDistinctOn applies the rules on the group-by properties (named,
// not reserved, each once), then their relation to the orders: these must
// start with group-by properties and name all of them before any other.
func checkDistinctOn(distinctOn []*datastorepb.PropertyReference, orders []string) error {
	var distinct []string
	for _, d := range distinctOn {
		name := d.GetName()
		switch {
		case name == "":
			return invalid("The property.name is the empty string.")
		case reserved.MatchString(name):
			return invalid("Group by is not supported for the property: %s", name)
		case slices.Contains(distinct, name):
			return invalid("Cannot group by a property multiple times.")
		}
		distinct = append(distinct, name)
	}
	if len(distinct) == 0 {
		return nil
	}
	grouped := 0
	for _, name := range orders {
		if !slices.Contains(distinct, name) {
			break
		}
		grouped++
	}
	if grouped < len(orders) && grouped < len(distinct) {
		return invalid("All group by properties must be ordered before any non group by properties.")
	}
	return nil
}

// walkFilters calls fn on f and every filter under it.
func walkFilters(f *datastorepb.Filter, fn func(*datastorepb.Filter)) {
	fn(f)
	for _, sub := range f.GetCompositeFilter().GetFilters() {
		walkFilters(sub, fn)
	}
}

func hasOp(f *datastorepb.Filter, op datastorepb.PropertyFilter_Operator) bool {
	found := false
	walkFilters(f, func(f *datastorepb.Filter) {
		found = found || (f.GetPropertyFilter() != nil && f.GetPropertyFilter().GetOp() == op)
	})
	return found
}

// normFilter validates a filter and returns a copy whose key values carry
// the query's partition (clients often leave it out).
func normFilter(p dscodec.Partition, f *datastorepb.Filter) (*datastorepb.Filter, error) {
	switch ft := f.GetFilterType().(type) {
	case *datastorepb.Filter_CompositeFilter:
		cf := ft.CompositeFilter
		if cf.GetOp() != datastorepb.CompositeFilter_AND && cf.GetOp() != datastorepb.CompositeFilter_OR {
			return nil, invalid("a composite filter must specify an operator")
		}
		if len(cf.GetFilters()) == 0 {
			return nil, invalid("A composite filter must have at least one sub-filter.")
		}
		out := &datastorepb.CompositeFilter{Op: cf.GetOp()}
		for _, sub := range cf.GetFilters() {
			n, err := normFilter(p, sub)
			if err != nil {
				return nil, err
			}
			out.Filters = append(out.Filters, n)
		}
		return &datastorepb.Filter{FilterType: &datastorepb.Filter_CompositeFilter{CompositeFilter: out}}, nil
	case *datastorepb.Filter_PropertyFilter:
		pf := proto.Clone(ft.PropertyFilter).(*datastorepb.PropertyFilter)
		if err := checkPropertyFilter(p, pf); err != nil {
			return nil, err
		}
		return &datastorepb.Filter{FilterType: &datastorepb.Filter_PropertyFilter{PropertyFilter: pf}}, nil
	}
	return nil, invalid("a filter must have exactly one of its fields set")
}

// checkPropertyFilter validates pf and fills in the partition of its key
// values.
func checkPropertyFilter(p dscodec.Partition, pf *datastorepb.PropertyFilter) error {
	name := pf.GetProperty().GetName()
	if name == "" {
		return invalid("The property.name is the empty string.")
	}
	if pf.GetOp() == datastorepb.PropertyFilter_OPERATOR_UNSPECIFIED {
		return invalid("a property filter must specify an operator")
	}
	if pf.GetValue().GetValueType() == nil {
		return invalid("The value %q does not contain a value.", name)
	}
	switch pf.GetOp() {
	case datastorepb.PropertyFilter_EQUAL, datastorepb.PropertyFilter_NOT_EQUAL,
		datastorepb.PropertyFilter_LESS_THAN, datastorepb.PropertyFilter_LESS_THAN_OR_EQUAL,
		datastorepb.PropertyFilter_GREATER_THAN, datastorepb.PropertyFilter_GREATER_THAN_OR_EQUAL:
		switch pf.GetValue().GetValueType().(type) {
		case *datastorepb.Value_ArrayValue:
			return invalid("A list value is not allowed")
		case *datastorepb.Value_EntityValue:
			return invalid("An entity value is not allowed")
		}
	case datastorepb.PropertyFilter_IN, datastorepb.PropertyFilter_NOT_IN:
		op := pf.GetOp().String()
		arr := pf.GetValue().GetArrayValue()
		switch n := len(arr.GetValues()); {
		case arr == nil:
			return invalid("%s requires an ArrayValue.", op)
		case n == 0:
			return invalid("%s requires an non-empty ArrayValue.", op)
		case pf.GetOp() == datastorepb.PropertyFilter_IN && n > maxIn:
			return invalid("IN supports up to %d values. There are %d values in the IN filter in your query.", maxIn, n)
		case pf.GetOp() == datastorepb.PropertyFilter_NOT_IN && n > maxNotIn:
			return invalid("NOT_IN supports up to %d values.", maxNotIn)
		}
	case datastorepb.PropertyFilter_HAS_ANCESTOR:
		if name != keyProperty {
			return invalid("property must be __key__")
		}
		if pf.GetValue().GetKeyValue() == nil {
			return invalid("HAS_ANCESTOR requires a key value")
		}
	default:
		return invalid("a property filter must specify an operator")
	}
	if name != keyProperty {
		return nil
	}
	vals := []*datastorepb.Value{pf.GetValue()}
	if arr := pf.GetValue().GetArrayValue(); arr != nil {
		vals = arr.GetValues()
	}
	for _, v := range vals {
		k := v.GetKeyValue()
		if k == nil {
			return invalid("__key__ filter value must be a Key")
		}
		nk, err := queryKey(p, k, pf.GetOp() == datastorepb.PropertyFilter_HAS_ANCESTOR)
		if err != nil {
			return err
		}
		v.ValueType = &datastorepb.Value_KeyValue{KeyValue: nk}
	}
	return nil
}

// queryKey checks a key a query compares with (a __key__ filter's value or
// an ancestor) and returns it with the query's partition filled in.
func queryKey(p dscodec.Partition, k *datastorepb.Key, ancestor bool) (*datastorepb.Key, error) {
	pid := k.GetPartitionId()
	kp := dscodec.Partition{Project: pid.GetProjectId(), Database: pid.GetDatabaseId(), Namespace: pid.GetNamespaceId()}
	if kp.Project == "" {
		kp.Project = p.Project
	}
	if kp.Database == "" {
		kp.Database = p.Database
	}
	if kp.Project != p.Project || kp.Database != p.Database {
		return nil, invalid("The request was for database '%s' but was attempting to access database '%s'", databaseName(p), databaseName(kp))
	}
	if kp.Namespace != p.Namespace {
		what := "__key__ filter"
		if ancestor {
			what = "ancestor"
		}
		return nil, invalid("The query namespace is '%s' but %s namespace is '%s'.", p.Namespace, what, kp.Namespace)
	}
	nk := &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: p.Project, DatabaseId: p.Database, NamespaceId: p.Namespace}, Path: k.GetPath()}
	if err := checkPath(nk, false, false); err != nil {
		return nil, err
	}
	return nk, nil
}
