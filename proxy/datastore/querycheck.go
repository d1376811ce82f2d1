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
	if f == nil {
		return nil
	}
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

// checkQuery validates q and returns its kind ("" for a kindless query)
// and its filter (nil for none) with the query's partition in its key
// values (clients often leave it out). The steps run in the order the
// Firestore emulator in Datastore mode checks a query, which decides the
// error a query with several faults gets (TestQueryFaultPairsAsTheService
// pins every pair of faults): the filter's form, filter by filter; one
// ancestor for all disjuncts; an empty kind, then an empty property name
// in the projection, orders or distinct-on; the limit, then the offset;
// the number of != and NOT_IN, then NOT_IN beside IN or OR; several kinds;
// each filter's operand (IN and NOT_IN arrays, HAS_ANCESTOR); each
// ancestor's partition; the orders of a kindless query; the projection;
// the distinct-on; each filter against the query (a projected equality, a
// kindless filter, __key__ values and their partition); the orders against
// the distinct-on; the number of disjunctions; and last a repeated order.
// Within one step the first fault in the query's order wins. The legacy
// Datastore emulator's order differs in places; the test records its
// answers too.
func checkQuery(p dscodec.Partition, q *datastorepb.Query) (kind string, filter *datastorepb.Filter, err error) {
	var proj, distinct []string
	steps := []func() error{
		func() error { return walkFiltersErr(q.GetFilter(), checkFilterForm) },
		func() error { return checkAncestors(q.GetFilter()) },
		func() error { return checkClauseNames(q) },
		func() error { return checkLimitOffset(q) },
		func() error { return checkNegations(q.GetFilter()) },
		func() error { kind, err = queryKind(q.GetKind()); return err },
		func() error { return walkFiltersErr(q.GetFilter(), checkFilterOperand) },
		func() error {
			return walkFiltersErr(q.GetFilter(), func(f *datastorepb.Filter) error { return checkAncestorPartition(p, f) })
		},
		func() error { return checkKindlessOrders(q.GetOrder(), kind) },
		func() error { proj, err = checkProjection(q.GetProjection()); return err },
		func() error { distinct, err = checkDistinctOn(q.GetDistinctOn()); return err },
		func() error { filter, err = normFilter(p, q.GetFilter(), kind, proj); return err },
		func() error { return checkGroupOrder(distinct, q.GetOrder()) },
		func() error { return checkDisjunctions(filter) },
		func() error { return checkRepeatedOrders(q.GetOrder()) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return "", nil, err
		}
	}
	return kind, filter, nil
}

// checkClauseNames refuses an empty kind, then an empty property name in
// the projection, the orders or the distinct-on (one message for all).
func checkClauseNames(q *datastorepb.Query) error {
	if slices.ContainsFunc(q.GetKind(), func(k *datastorepb.KindExpression) bool { return k.GetName() == "" }) {
		return invalid("The kind is the empty string.")
	}
	var names []string
	for _, pr := range q.GetProjection() {
		names = append(names, pr.GetProperty().GetName())
	}
	for _, o := range q.GetOrder() {
		names = append(names, o.GetProperty().GetName())
	}
	for _, d := range q.GetDistinctOn() {
		names = append(names, d.GetName())
	}
	if slices.Contains(names, "") {
		return invalid("The property.name is the empty string.")
	}
	return nil
}

// checkLimitOffset refuses a negative limit, then a negative offset.
func checkLimitOffset(q *datastorepb.Query) error {
	if q.GetLimit() != nil && q.GetLimit().GetValue() < 0 {
		return invalid("Limit must be non-negative.")
	}
	if q.GetOffset() < 0 {
		return invalid("Offset must be non-negative.")
	}
	return nil
}

// queryKind returns the query's one kind, or "" for a kindless query.
func queryKind(kinds []*datastorepb.KindExpression) (string, error) {
	switch len(kinds) {
	case 0:
		return "", nil
	case 1:
		return kinds[0].GetName(), nil
	}
	return "", invalid("multiple kinds not supported")
}

// checkNegations refuses more than one != or NOT_IN in a filter, and a
// NOT_IN beside an IN or an OR.
func checkNegations(filter *datastorepb.Filter) error {
	if filter == nil {
		return nil
	}
	notEq, notIn, inOr := 0, false, false
	walkFilters(filter, func(f *datastorepb.Filter) {
		if cf := f.GetCompositeFilter(); cf != nil {
			inOr = inOr || cf.GetOp() == datastorepb.CompositeFilter_OR
			return
		}
		switch f.GetPropertyFilter().GetOp() {
		case datastorepb.PropertyFilter_IN:
			inOr = true
		case datastorepb.PropertyFilter_NOT_IN:
			notIn = true
			notEq++
		case datastorepb.PropertyFilter_NOT_EQUAL:
			notEq++
		}
	})
	if notEq > 1 {
		return invalid("Only a single 'NOT_EQUAL' or 'NOT_IN' is allowed per query.")
	}
	if notIn && inOr {
		return invalid("'NOT_IN' cannot be used in the same query with 'IN' or 'OR'.")
	}
	return nil
}

// checkKindlessOrders refuses, in a kindless query, any order but __key__
// ascending.
func checkKindlessOrders(order []*datastorepb.PropertyOrder, kind string) error {
	if kind != "" {
		return nil
	}
	for _, o := range order {
		if o.GetProperty().GetName() != keyProperty || o.GetDirection() == datastorepb.PropertyOrder_DESCENDING {
			return invalid("kind is required for all orders except __key__ ascending")
		}
	}
	return nil
}

// checkProjection refuses a reserved projected property and one projected
// twice (__key__ may repeat), in the projection's order, and returns the
// projected properties but __key__.
func checkProjection(projection []*datastorepb.Projection) ([]string, error) {
	var proj []string
	for _, pr := range projection {
		name := pr.GetProperty().GetName()
		switch {
		case name == keyProperty:
			continue // __key__ may be projected more than once
		case reserved.MatchString(name):
			return nil, invalid("projections are not supported for the property: %s", name)
		case slices.Contains(proj, name):
			return nil, invalid("Cannot project a property multiple times.")
		}
		proj = append(proj, name)
	}
	return proj, nil
}

// checkDistinctOn refuses a reserved group-by property and one named
// twice, in their order, and returns the group-by properties.
func checkDistinctOn(distinctOn []*datastorepb.PropertyReference) ([]string, error) {
	var distinct []string
	for _, d := range distinctOn {
		name := d.GetName()
		switch {
		case reserved.MatchString(name):
			return nil, invalid("Group by is not supported for the property: %s", name)
		case slices.Contains(distinct, name):
			return nil, invalid("Cannot group by a property multiple times.")
		}
		distinct = append(distinct, name)
	}
	return distinct, nil
}

// checkGroupOrder refuses orders that name a property outside the
// group-by before naming every group-by property.
func checkGroupOrder(distinct []string, order []*datastorepb.PropertyOrder) error {
	if len(distinct) == 0 {
		return nil
	}
	grouped := 0
	for _, o := range order {
		if !slices.Contains(distinct, o.GetProperty().GetName()) {
			break
		}
		grouped++
	}
	if grouped < len(order) && grouped < len(distinct) {
		return invalid("All group by properties must be ordered before any non group by properties.")
	}
	return nil
}

// checkRepeatedOrders refuses an order on a property already ordered
// (Firestore's rule; the legacy emulator takes the repeat).
func checkRepeatedOrders(order []*datastorepb.PropertyOrder) error {
	var seen []string
	for _, o := range order {
		name := o.GetProperty().GetName()
		if slices.Contains(seen, name) {
			return invalid("order by clause cannot contain duplicate fields %s", name)
		}
		seen = append(seen, name)
	}
	return nil
}

// walkFilters calls fn on f and every filter under it, depth first.
func walkFilters(f *datastorepb.Filter, fn func(*datastorepb.Filter)) {
	_ = walkFiltersErr(f, func(f *datastorepb.Filter) error { fn(f); return nil })
}

// walkFiltersErr calls fn on f and every filter under it, depth first,
// and returns the first error; a nil f has none.
func walkFiltersErr(f *datastorepb.Filter, fn func(*datastorepb.Filter) error) error {
	if f == nil {
		return nil
	}
	if err := fn(f); err != nil {
		return err
	}
	for _, sub := range f.GetCompositeFilter().GetFilters() {
		if err := walkFiltersErr(sub, fn); err != nil {
			return err
		}
	}
	return nil
}

// checkFilterForm refuses a filter that is neither composite nor on a
// property, a composite without operator or sub-filters, and a property
// filter without name, operator or value, comparing with an array or an
// entity, or holding a key with a bad path (checkFilterForm of the
// filters under a composite is the walk's job).
func checkFilterForm(f *datastorepb.Filter) error {
	switch ft := f.GetFilterType().(type) {
	case *datastorepb.Filter_CompositeFilter:
		cf := ft.CompositeFilter
		if cf.GetOp() != datastorepb.CompositeFilter_AND && cf.GetOp() != datastorepb.CompositeFilter_OR {
			return invalid("a composite filter must specify an operator")
		}
		if len(cf.GetFilters()) == 0 {
			return invalid("A composite filter must have at least one sub-filter.")
		}
		return nil
	case *datastorepb.Filter_PropertyFilter:
		return checkPropertyForm(ft.PropertyFilter)
	}
	return invalid("a filter must have exactly one of its fields set")
}

// checkPropertyForm is checkFilterForm of a property filter.
func checkPropertyForm(pf *datastorepb.PropertyFilter) error {
	name := pf.GetProperty().GetName()
	switch {
	case name == "":
		return invalid("The property.name is the empty string.")
	case pf.GetOp() == datastorepb.PropertyFilter_OPERATOR_UNSPECIFIED:
		return invalid("a property filter must specify an operator")
	case pf.GetValue().GetValueType() == nil:
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
	case datastorepb.PropertyFilter_IN, datastorepb.PropertyFilter_NOT_IN, datastorepb.PropertyFilter_HAS_ANCESTOR:
	default:
		return invalid("a property filter must specify an operator")
	}
	for _, v := range filterValues(pf) {
		if err := checkScalar(v); err != nil {
			return err
		}
	}
	if name != keyProperty {
		return nil
	}
	for _, v := range filterValues(pf) {
		if k := v.GetKeyValue(); k != nil {
			if err := checkPath(k, false, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// filterValues returns the values pf compares with: its value, or the
// elements of its array.
func filterValues(pf *datastorepb.PropertyFilter) []*datastorepb.Value {
	if arr := pf.GetValue().GetArrayValue(); arr != nil {
		return arr.GetValues()
	}
	return []*datastorepb.Value{pf.GetValue()}
}

// checkAncestors refuses a filter whose disjuncts do not all have the
// same ancestor, or all none, judged on the filter as written, as
// Firestore judges it: an AND's parts may not name two ancestors, an OR's
// branches must all have the same one (so (anc a OR b = 1) AND anc a is
// refused though each of its disjuncts has ancestor a). The legacy
// emulator calls two ANDed ancestors a "duplicate ancestor or parent
// constraint".
func checkAncestors(f *datastorepb.Filter) error {
	if f == nil {
		return nil
	}
	if _, ok := ancestorOf(f); !ok {
		return invalid("All disjunctions must have a common and unique ancestor constraint.")
	}
	return nil
}

// ancestorOf returns the value of f's HAS_ANCESTOR filter (nil for
// none), and false when f has no single one. Any HAS_ANCESTOR counts,
// whatever its property and value, as in Firestore.
func ancestorOf(f *datastorepb.Filter) (*datastorepb.Value, bool) {
	if pf := f.GetPropertyFilter(); pf != nil {
		if pf.GetOp() != datastorepb.PropertyFilter_HAS_ANCESTOR {
			return nil, true
		}
		return pf.GetValue(), true
	}
	cf := f.GetCompositeFilter()
	or := cf.GetOp() == datastorepb.CompositeFilter_OR
	var anc *datastorepb.Value
	for i, sub := range cf.GetFilters() {
		a, ok := ancestorOf(sub)
		switch {
		case !ok, or && i > 0 && !proto.Equal(anc, a), !or && a != nil && anc != nil && !proto.Equal(anc, a):
			return nil, false
		case a != nil || or:
			anc = a
		}
	}
	return anc, true
}

// checkFilterOperand refuses an IN or NOT_IN without an array of values
// or with too many, and a HAS_ANCESTOR not on __key__ or not of a key.
func checkFilterOperand(f *datastorepb.Filter) error {
	pf := f.GetPropertyFilter()
	switch pf.GetOp() {
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
		if pf.GetProperty().GetName() != keyProperty {
			return invalid("property must be __key__")
		}
		if pf.GetValue().GetKeyValue() == nil {
			return invalid("HAS_ANCESTOR requires a key value")
		}
	}
	return nil
}

// checkAncestorPartition refuses an ancestor outside the query's
// partition p.
func checkAncestorPartition(p dscodec.Partition, f *datastorepb.Filter) error {
	if pf := f.GetPropertyFilter(); pf.GetOp() == datastorepb.PropertyFilter_HAS_ANCESTOR {
		_, err := queryKey(p, pf.GetValue().GetKeyValue(), true)
		return err
	}
	return nil
}

// normFilter checks each property filter of f against the query (a
// projected property with an equality, a property filter in a kindless
// query, a __key__ filter's values and their partition) and returns a
// copy of f whose key values carry the query's partition; a nil f gives
// nil.
func normFilter(p dscodec.Partition, f *datastorepb.Filter, kind string, proj []string) (*datastorepb.Filter, error) {
	if f == nil {
		return nil, nil
	}
	if cf := f.GetCompositeFilter(); cf != nil {
		out := &datastorepb.CompositeFilter{Op: cf.GetOp()}
		for _, sub := range cf.GetFilters() {
			n, err := normFilter(p, sub, kind, proj)
			if err != nil {
				return nil, err
			}
			out.Filters = append(out.Filters, n)
		}
		return &datastorepb.Filter{FilterType: &datastorepb.Filter_CompositeFilter{CompositeFilter: out}}, nil
	}
	pf := proto.Clone(f.GetPropertyFilter()).(*datastorepb.PropertyFilter)
	name := pf.GetProperty().GetName()
	switch {
	case (pf.GetOp() == datastorepb.PropertyFilter_EQUAL || pf.GetOp() == datastorepb.PropertyFilter_IN) && slices.Contains(proj, name):
		return nil, invalid("Cannot use projection on a property with an equality filter.")
	case kind == "" && name != keyProperty:
		return nil, invalid("kind is required for filter: %s", name)
	case name == keyProperty:
		if err := normKeyValues(p, pf); err != nil {
			return nil, err
		}
	}
	return &datastorepb.Filter{FilterType: &datastorepb.Filter_PropertyFilter{PropertyFilter: pf}}, nil
}

// normKeyValues refuses a __key__ filter's value that is not a key or
// not in the query's partition, and fills the partition in.
func normKeyValues(p dscodec.Partition, pf *datastorepb.PropertyFilter) error {
	for _, v := range filterValues(pf) {
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

// queryKey checks the partition of a key a query compares with (a __key__
// filter's value or an ancestor; checkFilterForm checked its path) and
// returns it with the query's partition filled in.
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
	return &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: p.Project, DatabaseId: p.Database, NamespaceId: p.Namespace}, Path: k.GetPath()}, nil
}
