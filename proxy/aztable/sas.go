package aztable

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
)

// Shared access signatures, verified as the Table service verifies them.
//
// An account SAS (it carries ss and srt) grants operations by signed
// service, resource type and permission; a table (service) SAS (it
// carries tn) grants entity operations on one table, optionally within a
// PartitionKey/RowKey range. Both are HMAC-SHA256 signatures, with the
// account key, over a string-to-sign built from the URL-decoded fields in
// a fixed order that depends on the signed version (sv):
//
//	account SAS, sv >= 2015-04-05:
//	  account \n sp \n ss \n srt \n st \n se \n sip \n spr \n sv \n
//	  (sv >= 2020-12-06 adds ses \n after sv)
//	table SAS, sv >= 2015-04-05:
//	  sp \n st \n se \n /table/<account>/<lowercase tn> \n si \n sip \n spr \n sv \n spk \n srk \n epk \n erk
//	table SAS, 2012-02-12 <= sv < 2015-04-05: without sip and spr, and
//	  before 2015-02-21 the resource is /<account>/<lowercase tn>
//
// The aztables SDK signs both kinds with sv 2019-02-02 (aztables
// sas_account.go, sas_service.go).

// sasKind tells the two kinds of signature apart.
type sasKind uint8

const (
	sasAccount sasKind = iota + 1
	sasTable
)

// sasParams are the query parameters a SAS consists of; each may appear
// once.
var sasParams = [...]string{"sv", "ss", "srt", "sp", "st", "se", "sip", "spr", "ses", "tn", "si", "spk", "srk", "epk", "erk", "sig"}

// sasToken is a parsed shared access signature: the fields as sent
// (URL-decoded), which the signature covers, and what they mean.
type sasToken struct {
	kind                    sasKind
	version                 string // sv
	services, resourceTypes string // ss, srt (account SAS)
	perms                   string // sp
	start, expiry           string // st, se
	ip, protocol            string // sip, spr
	encryptionScope         string // ses (account SAS, sv >= 2020-12-06)
	table, identifier       string // tn, si (table SAS)
	spk, srk, epk, erk      string // the key range (table SAS)
	sig                     []byte // the signature, decoded

	startAt, expiryAt time.Time  // startAt zero: no start
	ipLo, ipHi        netip.Addr // invalid: any address
}

// isSAS reports whether a request's query carries a shared access signature.
func isSAS(q url.Values) bool { return q.Has("sig") }

// parseSAS reads the SAS in q. Any error is the client's malformed
// signature: 403 AuthenticationFailed.
func parseSAS(q url.Values) (*sasToken, error) {
	for _, p := range sasParams {
		if len(q[p]) > 1 {
			return nil, fmt.Errorf("SAS parameter %s given %d times", p, len(q[p]))
		}
	}
	t := &sasToken{
		version: q.Get("sv"), services: q.Get("ss"), resourceTypes: q.Get("srt"), perms: q.Get("sp"),
		start: q.Get("st"), expiry: q.Get("se"), ip: q.Get("sip"), protocol: q.Get("spr"),
		encryptionScope: q.Get("ses"), table: q.Get("tn"), identifier: q.Get("si"),
		spk: q.Get("spk"), srk: q.Get("srk"), epk: q.Get("epk"), erk: q.Get("erk"),
	}
	sig, err := base64.StdEncoding.DecodeString(q.Get("sig"))
	if err != nil || len(sig) == 0 {
		return nil, errors.New("SAS signature (sig) is not base64")
	}
	t.sig = sig
	if !validVersion(t.version) {
		return nil, fmt.Errorf("SAS signed version (sv) %q", t.version)
	}
	if err := t.parseScope(q); err != nil {
		return nil, err
	}
	if err := t.parseBounds(); err != nil {
		return nil, err
	}
	return t, nil
}

// parseScope sets t's kind from q: an account SAS (ss, srt) or a table
// SAS (tn), each with the fields and signed version its kind needs.
func (t *sasToken) parseScope(q url.Values) error {
	switch {
	case q.Has("ss") || q.Has("srt"):
		return t.parseAccountScope(q)
	case q.Has("tn"):
		return t.parseTableScope()
	}
	return errors.New("SAS names neither an account scope (ss, srt) nor a table (tn)")
}

// parseAccountScope checks an account SAS's fields.
func (t *sasToken) parseAccountScope(q url.Values) error {
	t.kind = sasAccount
	if t.version < "2015-04-05" {
		return fmt.Errorf("account SAS with signed version %s (account SAS needs 2015-04-05 or later)", t.version)
	}
	if t.services == "" || t.resourceTypes == "" || t.perms == "" || t.expiry == "" {
		return errors.New("account SAS lacks one of ss, srt, sp, se")
	}
	if q.Has("tn") || q.Has("si") || q.Has("spk") || q.Has("srk") || q.Has("epk") || q.Has("erk") {
		return errors.New("account SAS with table SAS fields")
	}
	return nil
}

// parseTableScope checks a table SAS's fields.
func (t *sasToken) parseTableScope() error {
	t.kind = sasTable
	if t.version < "2012-02-12" {
		return fmt.Errorf("table SAS with signed version %s (table SAS needs 2012-02-12 or later)", t.version)
	}
	if t.table == "" {
		return errors.New("table SAS with an empty table name (tn)")
	}
	if t.identifier == "" && (t.perms == "" || t.expiry == "") {
		return errors.New("table SAS without a stored access policy (si) lacks sp or se")
	}
	if (t.srk != "" && t.spk == "") || (t.erk != "" && t.epk == "") {
		return errors.New("table SAS row key bound (srk, erk) without its partition key bound (spk, epk)")
	}
	return nil
}

// parseBounds reads t's validity period (st, se) and, where the signed
// version covers them, its protocol (spr) and address range (sip).
func (t *sasToken) parseBounds() error {
	var err error
	if t.start != "" {
		if t.startAt, err = parseSASTime(t.start); err != nil {
			return fmt.Errorf("SAS start (st): %w", err)
		}
	}
	if t.expiry != "" {
		if t.expiryAt, err = parseSASTime(t.expiry); err != nil {
			return fmt.Errorf("SAS expiry (se): %w", err)
		}
	}
	if t.signsAddress() {
		switch t.protocol {
		case "", "https", "https,http":
		default:
			return fmt.Errorf("SAS protocol (spr) %q: want https or https,http", t.protocol)
		}
		if t.ip != "" {
			if t.ipLo, t.ipHi, err = parseIPRange(t.ip); err != nil {
				return fmt.Errorf("SAS IP range (sip): %w", err)
			}
		}
	}
	return nil
}

// validVersion reports whether v looks like a service version, YYYY-MM-DD.
func validVersion(v string) bool {
	_, err := time.Parse("2006-01-02", v)
	return err == nil
}

// signsAddress reports whether the signed version covers sip and spr
// (2015-04-05 and later); older signatures do not, and their sip and spr,
// if any, are unsigned and ignored.
func (t *sasToken) signsAddress() bool { return t.version >= "2015-04-05" }

// sasTimeLayouts are the ISO 8601 forms the service accepts for st and se
// ("Formatting DateTime values"): a date, or a date and time to the minute,
// second or fraction of a second, with Z or an offset.
var sasTimeLayouts = [...]string{"2006-01-02", "2006-01-02T15:04Z07:00", time.RFC3339Nano}

func parseSASTime(s string) (time.Time, error) {
	for _, l := range sasTimeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not an ISO 8601 UTC time", s)
}

// parseIPRange reads "a.b.c.d" or the inclusive range "a.b.c.d-e.f.g.h".
func parseIPRange(s string) (lo, hi netip.Addr, err error) {
	a, b, isRange := strings.Cut(s, "-")
	if lo, err = netip.ParseAddr(a); err != nil {
		return lo, hi, err
	}
	hi = lo
	if isRange {
		if hi, err = netip.ParseAddr(b); err != nil {
			return lo, hi, err
		}
	}
	if lo.Is4() != hi.Is4() || hi.Less(lo) {
		return lo, hi, fmt.Errorf("%q is not an ascending range of one address family", s)
	}
	return lo.Unmap(), hi.Unmap(), nil
}

// stringToSign is what the signature must be the HMAC of, for account.
func (t *sasToken) stringToSign(account string) string {
	if t.kind == sasAccount {
		fields := []string{account, t.perms, t.services, t.resourceTypes, t.start, t.expiry, t.ip, t.protocol, t.version}
		if t.version >= "2020-12-06" {
			fields = append(fields, t.encryptionScope)
		}
		return strings.Join(fields, "\n") + "\n"
	}
	resource := "/" + account + "/" + strings.ToLower(t.table)
	if t.version >= "2015-02-21" {
		resource = "/table" + resource
	}
	fields := []string{t.perms, t.start, t.expiry, resource, t.identifier}
	if t.signsAddress() {
		fields = append(fields, t.ip, t.protocol)
	}
	fields = append(fields, t.version, t.spk, t.srk, t.epk, t.erk)
	return strings.Join(fields, "\n")
}

// verifySAS checks a SAS request's signature and the conditions that hold
// for the whole request: validity period, source address and protocol. It
// returns the token, whose grants route and the handlers check per
// operation and per entity (sasToken.authorize, inRange, keyRange).
func (f *Frontend) verifySAS(r *http.Request, q url.Values, now time.Time) (*sasToken, *apiError) {
	t, err := parseSAS(q)
	if err != nil {
		return nil, errAuth.because(err)
	}
	m := f.mac()
	m.buf = append(m.buf[:0], t.stringToSign(f.opts.Account)...)
	ok := m.verify(t.sig)
	f.macs.Put(m)
	if !ok {
		return nil, errAuth.because(errors.New("SAS signature mismatch"))
	}
	if t.identifier != "" {
		// Stored access policies are table ACLs; nemo keeps none (Set
		// Table ACL is accepted and dropped), so no identifier resolves.
		return nil, errAuth.because(fmt.Errorf("SAS names stored access policy %q, and the table has none", t.identifier))
	}
	if !t.startAt.IsZero() && now.Before(t.startAt) {
		return nil, errAuth.because(fmt.Errorf("SAS not valid before %s", t.start))
	}
	if now.After(t.expiryAt) {
		return nil, errAuth.because(fmt.Errorf("SAS expired at %s", t.expiry))
	}
	if t.ipLo.IsValid() {
		src := remoteAddr(r)
		if !src.IsValid() || src.Is4() != t.ipLo.Is4() || src.Less(t.ipLo) || t.ipHi.Less(src) {
			return nil, errSourceIP(src)
		}
	}
	if t.protocol == "https" && r.TLS == nil && !f.opts.SASAcceptHTTP {
		return nil, errSASProtocol
	}
	if t.kind == sasAccount && !strings.Contains(t.services, "t") {
		return nil, errSASService
	}
	return t, nil
}

// remoteAddr is the address the request came from (invalid if unknown).
func remoteAddr(r *http.Request) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, _ := netip.ParseAddr(host)
	return a.Unmap()
}

// action is an operation of the Table service, as the SAS rules name them.
type action uint8

const (
	actGetServiceProperties action = iota + 1
	actSetServiceProperties
	actGetServiceStats
	actQueryTables // Query Tables, including GET Tables('name')
	actCreateTable
	actDeleteTable
	actGetTableACL
	actSetTableACL
	actQueryEntities // Query Entities, including a point query
	actInsertEntity
	actUpdateEntity // Update or Merge Entity (If-Match given)
	actUpsertEntity // Insert Or Replace / Insert Or Merge Entity
	actDeleteEntity
)

// accountGrant is what an account SAS needs for an action: its resource
// type, and permissions (any one of anyOf, and all of allOf).
type accountGrant struct {
	resourceType byte
	anyOf, allOf string
}

// accountGrants is the service's table of Table operations for account
// SAS ("Create an account SAS", Table service). Get and Set Table ACL are
// never granted by an account SAS.
var accountGrants = map[action]accountGrant{
	actGetServiceProperties: {'s', "r", ""},
	actSetServiceProperties: {'s', "w", ""},
	actGetServiceStats:      {'s', "r", ""},
	actQueryTables:          {'c', "l", ""},
	actCreateTable:          {'c', "cw", ""},
	actDeleteTable:          {'c', "d", ""},
	actGetTableACL:          {'c', "", ""},
	actSetTableACL:          {'c', "", ""},
	actQueryEntities:        {'o', "r", ""},
	actInsertEntity:         {'o', "a", ""},
	actUpdateEntity:         {'o', "u", ""},
	actUpsertEntity:         {'o', "", "au"},
	actDeleteEntity:         {'o', "d", ""},
}

// tableGrants is what a table SAS needs for each entity action ("Create a
// service SAS", permissions for a table); it grants no other action.
var tableGrants = map[action]string{
	actQueryEntities: "r",
	actInsertEntity:  "a",
	actUpdateEntity:  "u",
	actUpsertEntity:  "au",
	actDeleteEntity:  "d",
}

// authorize checks that the SAS grants act on table (empty for actions
// on the service or the table list). A nil token (Shared Key, anonymous)
// grants everything.
func (t *sasToken) authorize(act action, table string) *apiError {
	if t == nil {
		return nil
	}
	if t.kind == sasAccount {
		g := accountGrants[act]
		if !strings.ContainsRune(t.resourceTypes, rune(g.resourceType)) {
			return errSASResourceType
		}
		if (g.anyOf == "" && g.allOf == "") || (g.anyOf != "" && !strings.ContainsAny(t.perms, g.anyOf)) || !containsAll(t.perms, g.allOf) {
			return errSASPermission
		}
		return nil
	}
	need, ok := tableGrants[act]
	if !ok {
		return errAuthorization.because(fmt.Errorf("a table SAS does not grant action %d", act))
	}
	if !strings.EqualFold(table, t.table) {
		return errAuthorization.because(fmt.Errorf("SAS for table %q used on table %q", t.table, table))
	}
	if !containsAll(t.perms, need) {
		return errSASPermission
	}
	return nil
}

func containsAll(s, chars string) bool {
	for _, c := range chars {
		if !strings.ContainsRune(s, c) {
			return false
		}
	}
	return true
}

// keyRange is the encoded-key range a table SAS confines entities to,
// half-open as odata.Range: nil bounds are open. spk alone admits its
// whole partition and later ones, spk with srk from that row on; epk alone
// admits up to the end of its partition, epk with erk up to that row,
// both inclusive.
func (t *sasToken) keyRange() (lo, hi []byte) {
	if t == nil || t.kind != sasTable {
		return nil, nil
	}
	switch {
	case t.spk != "" && t.srk != "":
		lo = tablecodec.EncodeKey(t.spk, t.srk)
	case t.spk != "":
		lo = tablecodec.PartitionPrefix(t.spk)
	}
	switch {
	case t.epk != "" && t.erk != "":
		hi = append(tablecodec.EncodeKey(t.epk, t.erk), 0) // just above that key
	case t.epk != "":
		hi = tablecodec.PartitionEnd(t.epk)
	}
	return lo, hi
}

// inRange reports whether the entity (pk, rk) is inside the SAS's range.
func (t *sasToken) inRange(pk, rk string) bool {
	lo, hi := t.keyRange()
	k := tablecodec.EncodeKey(pk, rk)
	return (lo == nil || bytes.Compare(k, lo) >= 0) && (hi == nil || bytes.Compare(k, hi) < 0)
}

// checkRange refuses a write to an entity outside the SAS's range.
func (t *sasToken) checkRange(pk, rk string) *apiError {
	if t.inRange(pk, rk) {
		return nil
	}
	return errAuthorization.because(fmt.Errorf("entity (%q, %q) is outside the SAS key range", pk, rk))
}
