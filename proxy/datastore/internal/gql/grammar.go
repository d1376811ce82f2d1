package gql

import (
	"fmt"
	"strings"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/genproto/googleapis/type/latlng"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// opHasParent is the service's HAS PARENT / HAS CHILD operator, which the
// public v1 API does not define; nemo's planner refuses it.
const opHasParent = datastorepb.PropertyFilter_Operator(12)

type parser struct {
	engine
	allowLiterals bool
	partition     *datastorepb.PartitionId // KEY()'s default
	named         map[string]*datastorepb.GqlQueryParameter
	positional    []*datastorepb.GqlQueryParameter
	used          []bool
	qualifiers    []string // FROM's kind: p.K.x means property x
	stContains    bool     // an ST_CONTAINS condition, refused after the parse
	depth         int      // nested parentheses and ARRAY()s
}

// maxDepth bounds the nesting of parentheses and ARRAY() literals, which
// the parser follows by recursion: a request of nested parentheses must
// not exhaust the stack.
const maxDepth = 1000

func (p *parser) nest() {
	if p.depth++; p.depth > maxDepth {
		p.errorf("The query nests parentheses or ARRAY() more than %d deep.", maxDepth)
	}
}

func newParser(g *datastorepb.GqlQuery, partition *datastorepb.PartitionId) *parser {
	p := &parser{
		allowLiterals: g.GetAllowLiterals(),
		partition:     partition,
		named:         g.GetNamedBindings(),
		positional:    g.GetPositionalBindings(),
	}
	p.used = make([]bool, len(p.positional))
	p.lookFunc = p.lookaheads()
	p.init(g.GetQueryString())
	return p
}

// lookaheads builds the bodies of the syntactic lookaheads.
func (p *parser) lookaheads() func(int) bool {
	e := &p.engine
	t := e.tok
	name := e.alt(t(tName), t(tQuotedName))
	propRef := seq(name, e.star(seq(t(tDot), name)))
	aggregatorCall := seq(t(tName), t(tLParen), propRef)
	projItem := e.alt(aggregatorCall, propRef)
	call := seq(t(tName), t(tLParen))
	valueStart := e.alt(e.alt(t(tNamedSite), t(tNumberSite)), call, e.alt(t(tSingleQuote), t(tDoubleQuote)),
		t(tInteger), t(tDouble), t(tTrue), t(tFalse), t(tNull))
	comparatorRight := e.alt(t(tEq), t(tNe), t(tLt), t(tLe), t(tGt), t(tGe), t(tIn), t(tHas))
	valueFirst := seq(valueStart, comparatorRight)
	condition := func() bool {
		xsp := e.scanpos
		e.scanning = true
		st := strings.EqualFold(e.nextImage(), "ST_CONTAINS")
		e.scanning = false
		if !st || call() {
			e.scanpos = xsp
			if e.alt(valueFirst, propRef)() {
				return true
			}
		}
		return false
	}
	bodies := [numLookaheads]scanner{
		laAggregations: e.alt(seq(t(tCount), t(tLParen)), seq(t(tCountUpTo), t(tLParen)), seq(t(tAvg), t(tLParen)),
			seq(t(tSum), t(tLParen)), call),
		laProjection:   seq(projItem, e.star(seq(t(tComma), projItem))),
		laCondition:    condition,
		laFunctionCall: call,
		laValueFirst:   valueFirst,
		laAggregator:   aggregatorCall,
		laPartition:    call,
	}
	return func(n int) bool { return bodies[n]() }
}

func (p *parser) errorf(format string, args ...any) {
	panic(syntaxError{fmt.Sprintf(format, args...)})
}

// wrongType is the service's error for a query sent to the other method.
func (p *parser) wrongType(want, got string) {
	method := map[string]string{entityQuery: "RunQuery", aggregationQuery: "RunAggregationQuery"}[got]
	p.errorf("Expecting %s, but got %s. Use Datastore.%s API instead for such queries.", want, got, method)
}

const (
	entityQuery      = "ENTITY_QUERY"
	aggregationQuery = "AGGREGATION_QUERY"
)

// --- queries ---

// query: select EOF, with every positional binding used.
func (p *parser) query() *datastorepb.Query {
	q := p.selectQuery()
	p.consume(tEOF)
	for i, u := range p.used {
		if !u {
			p.errorf("Unused positional binding: %d.", i+1)
		}
	}
	return q
}

// aggregation: AGGREGATE aggregations OVER ( select ) | SELECT aggregations
// [FROM kind] [WHERE condition], then EOF.
func (p *parser) aggregation() *datastorepb.AggregationQuery {
	aq := &datastorepb.AggregationQuery{}
	nested := &datastorepb.Query{}
	switch p.next() {
	case tAggregate:
		p.consume(tAggregate)
		aq.Aggregations = p.aggregationList()
		p.consume(tOver)
		p.consume(tLParen)
		nested = p.selectQuery()
		p.consume(tRParen)
	case tSelect:
		p.consume(tSelect)
		if p.lookahead(laAggregations, 2) {
			aq.Aggregations = p.aggregationList()
			if p.next() == tFrom {
				p.consume(tFrom)
				nested.Kind = append(nested.Kind, p.kind())
			} else {
				p.choice(2)
			}
			if p.next() == tWhere {
				p.consume(tWhere)
				nested.Filter = p.expression()
			} else {
				p.choice(3)
			}
			break
		}
		switch p.next() {
		case tDistinct, tName, tQuotedName, tStar:
			switch p.next() {
			case tDistinct:
				p.consume(tDistinct)
			case tStar:
				p.consume(tStar)
			default:
				p.propertyPath()
			}
			p.wrongType(aggregationQuery, entityQuery)
		default:
			p.choice(1)
			p.fail()
		}
	default:
		p.choice(4)
		p.fail()
	}
	p.consume(tEOF)
	aq.QueryType = &datastorepb.AggregationQuery_NestedQuery{NestedQuery: nested}
	return aq
}

func (p *parser) aggregationList() []*datastorepb.AggregationQuery_Aggregation {
	list := []*datastorepb.AggregationQuery_Aggregation{p.aggregate()}
	for {
		if p.next() != tComma {
			p.choice(5)
			return list
		}
		p.consume(tComma)
		list = append(list, p.aggregate())
	}
}

func (p *parser) aggregate() *datastorepb.AggregationQuery_Aggregation {
	a := &datastorepb.AggregationQuery_Aggregation{}
	switch p.next() {
	case tCount:
		p.consume(tCount)
		p.consume(tLParen)
		switch p.next() {
		case tStar:
			p.consume(tStar)
			a.Operator = &datastorepb.AggregationQuery_Aggregation_Count_{Count: &datastorepb.AggregationQuery_Aggregation_Count{}}
		case tName, tQuotedName:
			p.name()
			p.errorf("Cloud Datastore only supports counts over the entire result set (i.e. `COUNT(*)`)")
		default:
			p.choice(8)
			p.fail()
		}
		p.consume(tRParen)
	case tCountUpTo:
		p.consume(tCountUpTo)
		p.consume(tLParen)
		n := p.integerLiteral().GetIntegerValue()
		a.Operator = &datastorepb.AggregationQuery_Aggregation_Count_{Count: &datastorepb.AggregationQuery_Aggregation_Count{UpTo: wrapperspb.Int64(n)}}
		p.consume(tRParen)
	case tAvg:
		p.consume(tAvg)
		p.consume(tLParen)
		a.Operator = &datastorepb.AggregationQuery_Aggregation_Avg_{Avg: &datastorepb.AggregationQuery_Aggregation_Avg{Property: p.propertyReference()}}
		p.consume(tRParen)
	case tSum:
		p.consume(tSum)
		p.consume(tLParen)
		a.Operator = &datastorepb.AggregationQuery_Aggregation_Sum_{Sum: &datastorepb.AggregationQuery_Aggregation_Sum{Property: p.propertyReference()}}
		p.consume(tRParen)
	case tName:
		t := p.consume(tName)
		p.consume(tLParen)
		p.errorf("Unexpected aggregation function: %s", t.image)
	default:
		p.choice(6)
		p.fail()
	}
	if p.next() == tAs {
		p.consume(tAs)
		a.Alias = p.name()
	} else {
		p.choice(7)
	}
	return a
}

// selectQuery: SELECT [DISTINCT [ON (paths)]] (* | paths) [FROM kind]
// [WHERE condition] [GROUP BY ...] [ORDER BY orders] [LIMIT ...] [OFFSET ...].
func (p *parser) selectQuery() *datastorepb.Query {
	q := &datastorepb.Query{}
	if strings.EqualFold(p.nextImage(), "AGGREGATE") {
		p.wrongType(entityQuery, aggregationQuery)
	}
	p.consume(tSelect)
	distinct := false
	var projection, distinctOn [][]string
	distinctOnGiven := false
	if p.next() == tDistinct {
		p.consume(tDistinct)
		distinct = true
		if p.next() == tOn {
			p.consume(tOn)
			p.consume(tLParen)
			distinctOn = p.projectionList()
			distinctOnGiven = true
			p.consume(tRParen)
		} else {
			p.choice(9)
		}
	} else {
		p.choice(10)
	}
	if p.next() == tStar {
		p.consume(tStar)
		if distinct && !distinctOnGiven {
			p.errorf(`Encountered "*" immediately after DISTINCT.`)
		}
	} else {
		p.choice(11)
		if p.lookahead(laProjection, 3) {
			projection = p.projectionList()
		} else {
			switch p.next() {
			case tAvg, tCount, tCountUpTo, tSum, tName:
				p.aggregationList()
				p.wrongType(entityQuery, aggregationQuery)
			default:
				p.choice(12)
				p.fail()
			}
		}
	}
	if p.next() == tFrom {
		p.consume(tFrom)
		k := p.kind()
		q.Kind = append(q.Kind, k)
		p.qualifiers = []string{k.GetName()}
	} else {
		p.choice(13)
		p.qualifiers = nil
	}
	for _, path := range projection {
		q.Projection = append(q.Projection, &datastorepb.Projection{Property: p.defuzz(path)})
	}
	if distinct {
		if !distinctOnGiven {
			distinctOn = projection
		}
		for _, path := range distinctOn {
			q.DistinctOn = append(q.DistinctOn, p.defuzz(path))
		}
	}
	if p.next() == tWhere {
		p.consume(tWhere)
		q.Filter = p.expression()
	} else {
		p.choice(14)
	}
	if p.next() == tGroup {
		p.consume(tGroup)
		p.consume(tBy)
		p.errorf("GROUP BY not supported.")
	} else {
		p.choice(15)
	}
	if p.next() == tOrder {
		p.consume(tOrder)
		p.consume(tBy)
		q.Order = p.orderList()
	} else {
		p.choice(16)
	}
	if p.next() == tLimit {
		p.consume(tLimit)
		p.limit(q)
	} else {
		p.choice(17)
	}
	if p.next() == tOffset {
		p.consume(tOffset)
		p.offset(q)
	} else {
		p.choice(18)
	}
	return q
}

// projectionList: paths separated by commas (FIRST(p), the old
// aggregator, belongs to another version of GQL: its query is refused as an
// aggregation).
func (p *parser) projectionList() [][]string {
	var list [][]string
	for {
		if p.lookahead(laAggregator, 2) {
			p.consume(tName)
			p.wrongType(entityQuery, aggregationQuery)
		}
		switch p.next() {
		case tName, tQuotedName:
			list = append(list, p.propertyPath())
		default:
			p.choice(41)
			p.fail()
		}
		if p.next() != tComma {
			p.choice(40)
			return list
		}
		p.consume(tComma)
	}
}

func (p *parser) orderList() []*datastorepb.PropertyOrder {
	var list []*datastorepb.PropertyOrder
	for {
		o := &datastorepb.PropertyOrder{Property: p.propertyReference(), Direction: datastorepb.PropertyOrder_ASCENDING}
		switch p.next() {
		case tAsc:
			p.consume(tAsc)
		case tDesc:
			p.consume(tDesc)
			o.Direction = datastorepb.PropertyOrder_DESCENDING
		default:
			p.choice(35)
		}
		list = append(list, o)
		if p.next() != tComma {
			p.choice(33)
			return list
		}
		p.consume(tComma)
	}
}

// position is a LIMIT or OFFSET operand: a count or a cursor.
type position struct {
	cursor []byte // nil: a count
	count  int32
}

type constraint int

const (
	wantValue constraint = iota
	wantCursor
	wantInteger
	wantCursorOrInteger
	wantRegion
)

// limit: n | @x (a count or an end cursor) | FIRST(a, b) with one a cursor
// and the other a count.
func (p *parser) limit(q *datastorepb.Query) {
	var first, second *position
	switch p.next() {
	case tInteger, tNamedSite, tNumberSite:
		first = p.resultPosition("limit", wantCursorOrInteger)
	case tName:
		t := p.consume(tName)
		if !strings.EqualFold(t.image, "first") {
			p.errorf(`Unexpected name "%s" (after LIMIT).`, t.image)
		}
		p.consume(tLParen)
		first = p.resultPosition("limit", wantCursorOrInteger)
		p.consume(tComma)
		c := wantCursor
		if first.cursor != nil {
			c = wantInteger
		}
		second = p.resultPosition("limit", c)
		p.consume(tRParen)
	default:
		p.choice(36)
		p.fail()
	}
	if first.cursor == nil {
		first, second = second, first
	}
	if first != nil {
		q.EndCursor = first.cursor
	}
	if second != nil {
		q.Limit = wrapperspb.Int32(second.count)
	}
}

// offset: n | @x (a count or a start cursor) | @cursor + n.
func (p *parser) offset(q *datastorepb.Query) {
	at := p.resultPosition("offset", wantCursorOrInteger)
	var count *position
	if p.next() == tPlus {
		p.consume(tPlus)
		if at.cursor == nil {
			p.errorf(`Encountered "+" after integer offset.`)
		}
		count = p.resultPosition("offset", wantInteger)
	} else {
		p.choice(37)
	}
	if at.cursor == nil {
		count, at = at, nil
	}
	if at != nil {
		q.StartCursor = at.cursor
	}
	if count != nil {
		q.Offset = count.count
	}
}

func (p *parser) resultPosition(what string, c constraint) *position {
	switch p.next() {
	case tInteger:
		v := p.integerLiteral()
		if c == wantCursor {
			p.errorf("Expected %s cursor instead of %s.", what, p.toks[p.cur].image)
		}
		return &position{count: p.count(what, v.GetIntegerValue())}
	case tNamedSite, tNumberSite:
		param := p.bindingSite(what, c)
		if cur, ok := param.GetParameterType().(*datastorepb.GqlQueryParameter_Cursor); ok {
			return &position{cursor: nonNil(cur.Cursor)}
		}
		return &position{count: p.count(what, param.GetValue().GetIntegerValue())}
	default:
		p.choice(38)
		p.fail()
	}
	return nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func (p *parser) count(what string, n int64) int32 {
	if n < 0 {
		p.errorf("The %s %d is < 0.", what, n)
	}
	if n > 1<<31-1 {
		p.errorf("The %s %d is too large.", what, n)
	}
	return int32(n)
}

// --- conditions ---

// expression: conjunctions joined by OR; conjunction: primaries joined by
// AND; primary: a condition or a parenthesised expression.
func (p *parser) expression() *datastorepb.Filter {
	fs := []*datastorepb.Filter{p.conjunction()}
	for {
		if p.next() != tOr {
			p.choice(19)
			return composite(datastorepb.CompositeFilter_OR, fs)
		}
		p.consume(tOr)
		fs = append(fs, p.conjunction())
	}
}

func (p *parser) conjunction() *datastorepb.Filter {
	fs := []*datastorepb.Filter{p.primary()}
	for {
		if p.next() != tAnd {
			p.choice(20)
			return composite(datastorepb.CompositeFilter_AND, fs)
		}
		p.consume(tAnd)
		fs = append(fs, p.primary())
	}
}

func composite(op datastorepb.CompositeFilter_Operator, fs []*datastorepb.Filter) *datastorepb.Filter {
	if len(fs) == 1 {
		return fs[0]
	}
	return &datastorepb.Filter{FilterType: &datastorepb.Filter_CompositeFilter{CompositeFilter: &datastorepb.CompositeFilter{Op: op, Filters: fs}}}
}

func (p *parser) primary() *datastorepb.Filter {
	if p.lookahead(laCondition, 1) {
		return p.condition()
	}
	if p.next() != tLParen {
		p.choice(21)
		p.fail()
	}
	p.consume(tLParen)
	p.nest()
	f := p.expression()
	p.depth--
	p.consume(tRParen)
	return f
}

func (p *parser) condition() *datastorepb.Filter {
	if p.lookahead(laFunctionCall, 2) && strings.EqualFold(p.nextImage(), "ST_CONTAINS") {
		return p.stContainsCondition()
	}
	switch p.next() {
	case tFalse, tNull, tTrue, tInteger, tDouble, tSingleQuote, tDoubleQuote, tName, tQuotedName, tNamedSite, tNumberSite:
		return p.propertyCondition()
	}
	p.choice(22)
	p.fail()
	return nil
}

// stContainsCondition: ST_CONTAINS(region, property) with region CIRCLE,
// RECTANGLE or a binding. The service parses it and then refuses it, as
// nemo does.
func (p *parser) stContainsCondition() *datastorepb.Filter {
	p.consume(tName)
	p.consume(tLParen)
	switch {
	case strings.EqualFold(p.nextImage(), "CIRCLE"):
		p.function("CIRCLE")
		p.consume(tLParen)
		p.latLngLiteral()
		p.consume(tComma)
		p.number()
		p.consume(tRParen)
	case strings.EqualFold(p.nextImage(), "RECTANGLE"):
		p.function("RECTANGLE")
		p.consume(tLParen)
		p.latLngLiteral()
		p.consume(tComma)
		p.latLngLiteral()
		p.consume(tRParen)
	default:
		switch p.next() {
		case tNamedSite, tNumberSite:
			p.bindingSite("region", wantRegion)
		default:
			p.choice(23)
			p.errorf("Expected Circle(...), Rectangle(...), or a binding site as the first argument to ST_Contains")
		}
	}
	p.consume(tComma)
	p.propertyReference()
	p.consume(tRParen)
	p.stContains = true
	return &datastorepb.Filter{}
}

// function consumes a name that must be the function fn.
func (p *parser) function(fn string) {
	t := p.consume(tName)
	if !strings.EqualFold(t.image, fn) {
		p.errorf(`Expected function %s, found: "%s"`, fn, t.image)
	}
}

func (p *parser) latLngLiteral() *datastorepb.Value {
	p.function("LATLNG")
	p.consume(tLParen)
	v := p.latLng()
	p.consume(tRParen)
	return v
}

func (p *parser) latLng() *datastorepb.Value {
	lat := p.number()
	p.consume(tComma)
	lng := p.number()
	return &datastorepb.Value{ValueType: &datastorepb.Value_GeoPointValue{GeoPointValue: &latlng.LatLng{Latitude: lat, Longitude: lng}}}
}

func (p *parser) number() float64 {
	switch p.next() {
	case tInteger:
		return float64(p.integerLiteral().GetIntegerValue())
	case tDouble:
		return p.doubleLiteral().GetDoubleValue()
	}
	p.choice(24)
	p.fail()
	return 0
}

// propertyCondition: value comparator property | property IS NULL |
// property comparator value.
func (p *parser) propertyCondition() *datastorepb.Filter {
	var v *datastorepb.Value
	var op datastorepb.PropertyFilter_Operator
	var prop *datastorepb.PropertyReference
	if p.lookahead(laValueFirst, 2) {
		v = p.value()
		op = p.comparatorAfterValue()
		prop = p.propertyReference()
	} else {
		switch p.next() {
		case tName, tQuotedName:
			prop = p.propertyReference()
			switch p.next() {
			case tIs:
				p.consume(tIs)
				op = datastorepb.PropertyFilter_EQUAL
				v = p.null()
			case tContains, tHas, tIn, tNot, tEq, tNe, tLt, tLe, tGt, tGe:
				op = p.comparatorAfterProperty()
				v = p.value()
			default:
				p.choice(25)
				p.fail()
			}
		default:
			p.choice(26)
			p.fail()
		}
	}
	if op == datastorepb.PropertyFilter_IN && v.GetArrayValue() == nil {
		op = datastorepb.PropertyFilter_EQUAL
	}
	return &datastorepb.Filter{FilterType: &datastorepb.Filter_PropertyFilter{PropertyFilter: &datastorepb.PropertyFilter{Property: prop, Op: op, Value: v}}}
}

func (p *parser) comparatorAfterProperty() datastorepb.PropertyFilter_Operator {
	switch p.next() {
	case tEq, tNe, tLt, tLe, tGt, tGe:
		return comparison(p.consume(p.next()).kind, false)
	case tContains, tIn:
		p.consume(p.next())
		return datastorepb.PropertyFilter_IN
	case tNot:
		p.consume(tNot)
		switch p.next() {
		case tContains, tIn:
			p.consume(p.next())
		default:
			p.choice(28)
			p.fail()
		}
		return datastorepb.PropertyFilter_NOT_IN
	case tHas:
		p.consume(tHas)
		switch p.next() {
		case tAncestor:
			p.consume(tAncestor)
			return datastorepb.PropertyFilter_HAS_ANCESTOR
		case tParent:
			p.consume(tParent)
			return opHasParent
		}
		p.choice(29)
		p.fail()
	}
	p.choice(30)
	p.fail()
	return 0
}

// comparatorAfterValue: the comparisons read from the property's side,
// IN, HAS DESCENDANT (ancestor) and HAS CHILD (parent).
func (p *parser) comparatorAfterValue() datastorepb.PropertyFilter_Operator {
	switch p.next() {
	case tEq, tNe, tLt, tLe, tGt, tGe:
		return comparison(p.consume(p.next()).kind, true)
	case tIn:
		p.consume(tIn)
		return datastorepb.PropertyFilter_IN
	case tHas:
		p.consume(tHas)
		switch p.next() {
		case tDescendant:
			p.consume(tDescendant)
			return datastorepb.PropertyFilter_HAS_ANCESTOR
		case tChild:
			p.consume(tChild)
			return opHasParent
		}
		p.choice(31)
		p.fail()
	}
	p.choice(32)
	p.fail()
	return 0
}

func comparison(kind int, flipped bool) datastorepb.PropertyFilter_Operator {
	ops := map[int][2]datastorepb.PropertyFilter_Operator{
		tEq: {datastorepb.PropertyFilter_EQUAL, datastorepb.PropertyFilter_EQUAL},
		tNe: {datastorepb.PropertyFilter_NOT_EQUAL, datastorepb.PropertyFilter_NOT_EQUAL},
		tLt: {datastorepb.PropertyFilter_LESS_THAN, datastorepb.PropertyFilter_GREATER_THAN},
		tLe: {datastorepb.PropertyFilter_LESS_THAN_OR_EQUAL, datastorepb.PropertyFilter_GREATER_THAN_OR_EQUAL},
		tGt: {datastorepb.PropertyFilter_GREATER_THAN, datastorepb.PropertyFilter_LESS_THAN},
		tGe: {datastorepb.PropertyFilter_GREATER_THAN_OR_EQUAL, datastorepb.PropertyFilter_LESS_THAN_OR_EQUAL},
	}[kind]
	if flipped {
		return ops[1]
	}
	return ops[0]
}

// --- names ---

func (p *parser) propertyReference() *datastorepb.PropertyReference {
	return p.defuzz(p.propertyPath())
}

// propertyPath: name (. name)*.
func (p *parser) propertyPath() []string {
	path := []string{p.name()}
	for {
		if p.next() != tDot {
			p.choice(42)
			return path
		}
		p.consume(tDot)
		path = append(path, p.name())
	}
}

// defuzz joins a dotted path, dropping a leading qualifier that names the
// queried kind (SELECT K.a FROM K means property a).
func (p *parser) defuzz(path []string) *datastorepb.PropertyReference {
	if len(path) > 1 && len(p.qualifiers) > 0 && p.qualifiers[0] == path[0] {
		path = path[1:]
	}
	return &datastorepb.PropertyReference{Name: strings.Join(path, ".")}
}

func (p *parser) kind() *datastorepb.KindExpression {
	return &datastorepb.KindExpression{Name: p.name()}
}

func (p *parser) name() string {
	switch p.next() {
	case tName:
		return p.consume(tName).image
	case tQuotedName:
		return unquote(p.consume(tQuotedName).image)
	}
	p.choice(51)
	p.fail()
	return ""
}

// --- values ---

func (p *parser) value() *datastorepb.Value {
	switch p.next() {
	case tNamedSite, tNumberSite:
		return proto.Clone(p.bindingSite("value", wantValue).GetValue()).(*datastorepb.Value)
	case tName:
		return p.syntheticLiteral()
	case tSingleQuote, tDoubleQuote:
		return p.stringLiteral()
	case tInteger:
		return p.integerLiteral()
	case tDouble:
		return p.doubleLiteral()
	case tTrue, tFalse:
		t := p.consume(p.next())
		p.checkLiteral(t.image)
		return &datastorepb.Value{ValueType: &datastorepb.Value_BooleanValue{BooleanValue: t.kind == tTrue}}
	case tNull:
		return p.null()
	}
	p.choice(43)
	p.fail()
	return nil
}

func (p *parser) null() *datastorepb.Value {
	p.checkLiteral(p.consume(tNull).image)
	return &datastorepb.Value{ValueType: &datastorepb.Value_NullValue{}}
}

func (p *parser) checkLiteral(text string) {
	if !p.allowLiterals {
		p.errorf("Disallowed literal: %s.", text)
	}
}

// functions are the synthetic literals the service knows.
var functions = []string{"BLOB", "BLOBKEY", "CIRCLE", "DATETIME", "KEY", "LATLNG", "RECTANGLE", "ST_CONTAINS", "ARRAY"}

// syntheticLiteral: KEY(...), ARRAY(...), BLOB('...'), DATETIME('...'),
// LATLNG(lat, lng).
func (p *parser) syntheticLiteral() *datastorepb.Value {
	t := p.consume(tName)
	fn := strings.ToUpper(t.image)
	known := false
	for _, f := range functions {
		known = known || f == fn
	}
	if !known {
		p.errorf(`Unknown function "%s".`, t.image)
	}
	p.checkLiteral(t.image)
	p.consume(tLParen)
	var v *datastorepb.Value
	switch fn {
	case "KEY":
		v = p.keyLiteral()
	case "LATLNG":
		v = p.latLng()
	case "ARRAY":
		p.nest()
		v = p.arrayLiteral()
		p.depth--
	default:
		if k := p.next(); k != tSingleQuote && k != tDoubleQuote {
			p.choice(44)
			p.fail()
		}
		text := p.stringLiteral().GetStringValue()
		switch fn {
		case "BLOB":
			v = p.blob(text)
		case "DATETIME":
			v = p.datetime(text)
		default:
			p.errorf(`Unsupported function "%s".`, fn)
		}
	}
	p.consume(tRParen)
	return v
}

func (p *parser) arrayLiteral() *datastorepb.Value {
	arr := &datastorepb.ArrayValue{}
	switch p.next() {
	case tFalse, tNull, tTrue, tInteger, tDouble, tSingleQuote, tDoubleQuote, tName, tNamedSite, tNumberSite:
		arr.Values = append(arr.Values, p.value())
		for p.next() == tComma {
			p.consume(tComma)
			arr.Values = append(arr.Values, p.value())
		}
		p.choice(45)
	default:
		p.choice(46)
	}
	return &datastorepb.Value{ValueType: &datastorepb.Value_ArrayValue{ArrayValue: arr}}
}

// keyLiteral: [PROJECT('p'),] [NAMESPACE('n'),] [DATABASE('d'),] then kind,
// id-or-name pairs. Without a partition the key is in the query's; with
// one, a missing project or database is the query's, a missing namespace
// the default one.
func (p *parser) keyLiteral() *datastorepb.Value {
	var pid *datastorepb.PartitionId
	for p.lookahead(laPartition, 2) {
		t := p.consume(tName)
		if pid == nil {
			pid = &datastorepb.PartitionId{}
		}
		project := strings.EqualFold(t.image, "project")
		namespace := strings.EqualFold(t.image, "namespace")
		database := strings.EqualFold(t.image, "database")
		switch {
		case project:
			if pid.ProjectId != "" {
				p.errorf("A key may have at most one project.")
			}
			if pid.NamespaceId != "" {
				p.errorf("A key's project must precede its namespace.")
			}
		case namespace:
			if pid.NamespaceId != "" {
				p.errorf("A key may have at most one namespace.")
			}
		case database:
			if pid.DatabaseId != "" {
				p.errorf("A key may have at most one database.")
			}
		default:
			p.errorf(`Unknown partition dimension "%s".`, t.image)
		}
		p.consume(tLParen)
		s := p.stringLiteral().GetStringValue()
		switch {
		case project:
			pid.ProjectId = s
		case namespace:
			pid.NamespaceId = s
		default:
			pid.DatabaseId = s
		}
		p.consume(tRParen)
		p.consume(tComma)
	}
	if pid == nil {
		pid = proto.Clone(p.partition).(*datastorepb.PartitionId)
	} else {
		if pid.ProjectId == "" {
			pid.ProjectId = p.partition.GetProjectId()
		}
		if pid.DatabaseId == "" {
			pid.DatabaseId = p.partition.GetDatabaseId()
		}
	}
	key := &datastorepb.Key{PartitionId: pid}
	for {
		e := &datastorepb.Key_PathElement{Kind: p.kind().GetName()}
		p.consume(tComma)
		switch p.next() {
		case tInteger:
			e.IdType = &datastorepb.Key_PathElement_Id{Id: p.integerLiteral().GetIntegerValue()}
		case tSingleQuote, tDoubleQuote:
			e.IdType = &datastorepb.Key_PathElement_Name{Name: p.stringLiteral().GetStringValue()}
		default:
			p.choice(48)
			p.fail()
		}
		key.Path = append(key.Path, e)
		if p.next() != tComma {
			p.choice(47)
			break
		}
		p.consume(tComma)
	}
	return &datastorepb.Value{ValueType: &datastorepb.Value_KeyValue{KeyValue: key}}
}

func (p *parser) stringLiteral() *datastorepb.Value {
	switch p.next() {
	case tSingleQuote, tDoubleQuote:
		t := p.consume(p.next())
		p.checkLiteral(t.image)
		return &datastorepb.Value{ValueType: &datastorepb.Value_StringValue{StringValue: unquote(t.image)}}
	}
	p.choice(49)
	p.fail()
	return nil
}

func (p *parser) integerLiteral() *datastorepb.Value {
	t := p.consume(tInteger)
	p.checkLiteral(t.image)
	n, err := parseLong(t.image)
	if err != nil {
		p.errorf("Invalid integer literal: %s", err.Error())
	}
	return &datastorepb.Value{ValueType: &datastorepb.Value_IntegerValue{IntegerValue: n}}
}

func (p *parser) doubleLiteral() *datastorepb.Value {
	t := p.consume(tDouble)
	p.checkLiteral(t.image)
	d, err := parseDouble(t.image)
	if err != nil {
		p.errorf("Invalid double literal: %s", err.Error())
	}
	return &datastorepb.Value{ValueType: &datastorepb.Value_DoubleValue{DoubleValue: d}}
}

// --- bindings ---

// bindingSite resolves @name or @n and checks what it is bound to against
// what the site needs.
func (p *parser) bindingSite(what string, c constraint) *datastorepb.GqlQueryParameter {
	var site token
	var param *datastorepb.GqlQueryParameter
	switch p.next() {
	case tNamedSite:
		site = p.consume(tNamedSite)
		name := site.image[1:]
		if param = p.named[name]; param == nil {
			p.errorf("Absent named binding: %s.", name)
		}
	case tNumberSite:
		site = p.consume(tNumberSite)
		n, err := parseLong(site.image[1:])
		if err != nil {
			p.errorf("Invalid positional binding site: %s", err.Error())
		}
		if n == 0 {
			p.errorf("Invalid binding site @0.")
		}
		if n > int64(len(p.positional)) {
			p.errorf("Absent positional binding: %d.", n)
		}
		p.used[n-1] = true
		param = p.positional[n-1]
	default:
		p.choice(50)
		p.fail()
	}
	_, isValue := param.GetParameterType().(*datastorepb.GqlQueryParameter_Value)
	_, isCursor := param.GetParameterType().(*datastorepb.GqlQueryParameter_Cursor)
	switch c {
	case wantValue, wantInteger:
		if !isValue {
			p.errorf("Binding site %s for %s bound to non-value parameter.", site.image, what)
		}
	case wantCursor:
		if !isCursor {
			p.errorf("Binding site %s for %s bound to non-cursor parameter.", site.image, what)
		}
	case wantCursorOrInteger:
		if !isCursor && !isValue {
			p.errorf("Binding site %s for %s bound to parameter that is neither a cursor nor an integer value.", site.image, what)
		}
	case wantRegion:
		p.errorf("Binding site %s for %s bound to non-geo-region parameter.", site.image, what)
	}
	if (c == wantInteger || c == wantCursorOrInteger) && isValue {
		if _, ok := param.GetValue().GetValueType().(*datastorepb.Value_IntegerValue); !ok {
			p.errorf("Binding site %s for %s bound to non-integer value parameter.", site.image, what)
		}
	}
	return param
}
