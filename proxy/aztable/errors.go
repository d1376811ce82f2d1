package aztable

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/proxy/aztable/odata"
	"github.com/nemocache/nemo/txn"
)

// apiError is a failure in the service's terms: an HTTP status, an Azure
// error code and its message. cause, when set, is logged, never sent.
type apiError struct {
	status int
	code   string
	msg    string
	cause  error
}

func (e *apiError) Error() string {
	if e.cause != nil {
		return fmt.Sprintf("%d %s: %v", e.status, e.code, e.cause)
	}
	return fmt.Sprintf("%d %s", e.status, e.code)
}

func (e *apiError) Unwrap() error { return e.cause }

func newErr(status int, code, msg string) *apiError {
	return &apiError{status: status, code: code, msg: msg}
}

func (e *apiError) because(err error) *apiError {
	c := *e
	c.cause = err
	return &c
}

// The service's errors, with its messages.
var (
	errTableNotFound     = newErr(http.StatusNotFound, "TableNotFound", "The table specified does not exist.")
	errResourceNotFound  = newErr(http.StatusNotFound, "ResourceNotFound", "The specified resource does not exist.")
	errTableExists       = newErr(http.StatusConflict, "TableAlreadyExists", "The table specified already exists.")
	errEntityExists      = newErr(http.StatusConflict, "EntityAlreadyExists", "The specified entity already exists.")
	errCondition         = newErr(http.StatusPreconditionFailed, "UpdateConditionNotSatisfied", "The update condition specified in the request was not satisfied.")
	errInvalidInput      = newErr(http.StatusBadRequest, "InvalidInput", "One of the request inputs is not valid.")
	errBadQuery          = newErr(http.StatusBadRequest, "InvalidInput", "The query condition specified in the request is invalid.")
	errQuerySyntax       = newErr(http.StatusBadRequest, "InvalidInput", "Bad Request - Error in query syntax.")
	errDuplicateProps    = newErr(http.StatusBadRequest, "DuplicatePropertiesSpecified", "A property is specified more than one time.")
	errOutOfRange        = newErr(http.StatusBadRequest, "OutOfRangeInput", "One of the request inputs is out of range.")
	errBadTableName      = newErr(http.StatusBadRequest, "InvalidResourceName", "The specifed resource name contains invalid characters.")
	errTableNameLength   = newErr(http.StatusBadRequest, "OutOfRangeInput", "The specified resource name length is not within the permissible limits.")
	errNeedKeys          = newErr(http.StatusBadRequest, "PropertiesNeedValue", "The values are not specified for all properties in the entity.")
	errPropName          = newErr(http.StatusBadRequest, "PropertyNameInvalid", "The property name is invalid.")
	errPropNameLong      = newErr(http.StatusBadRequest, "PropertyNameTooLong", "The property name exceeds the maximum allowed length (255).")
	errTooManyProps      = newErr(http.StatusBadRequest, "TooManyProperties", "The entity contains more properties than allowed.")
	errPropTooLarge      = newErr(http.StatusBadRequest, "PropertyValueTooLarge", "The property value exceeds the maximum allowed size (64KB). If the property value is a string, it is UTF-16 encoded and the maximum number of characters should be 32K or less.")
	errEntityTooLarge    = newErr(http.StatusBadRequest, "EntityTooLarge", "The entity is larger than the maximum allowed size (1MB).")
	errBodyTooLarge      = newErr(http.StatusRequestEntityTooLarge, "RequestBodyTooLarge", "The request body is too large and exceeds the maximum permissible limit.")
	errAuth              = newErr(http.StatusForbidden, "AuthenticationFailed", "Server failed to authenticate the request. Make sure the value of Authorization header is formed correctly including the signature.")
	errKeyAuth           = newErr(http.StatusForbidden, "KeyBasedAuthenticationNotPermitted", "Key based authentication is not permitted on this storage account.")
	errAuthorization     = newErr(http.StatusForbidden, "AuthorizationFailure", "This request is not authorized to perform this operation.")
	errSASPermission     = newErr(http.StatusForbidden, "AuthorizationPermissionMismatch", "This request is not authorized to perform this operation using this permission.")
	errSASResourceType   = newErr(http.StatusForbidden, "AuthorizationResourceTypeMismatch", "This request is not authorized to perform this operation using this resource type.")
	errSASService        = newErr(http.StatusForbidden, "AuthorizationServiceMismatch", "This request is not authorized to perform this operation using this service.")
	errSASProtocol       = newErr(http.StatusForbidden, "AuthorizationProtocolMismatch", "This request is not authorized to perform this operation using this protocol.")
	errMissingHeader     = newErr(http.StatusBadRequest, "MissingRequiredHeader", "An HTTP header that's mandatory for this request is not specified.")
	errDuplicateRow      = newErr(http.StatusBadRequest, "InvalidDuplicateRow", "The batch request contains multiple changes with same row key. An entity can appear only once in a batch request.")
	errOtherPartition    = newErr(http.StatusBadRequest, "CommandsInBatchActOnDifferentPartitions", "All commands in a batch must operate on same entity group.")
	errTooManyOps        = newErr(http.StatusBadRequest, "InvalidInput", "The batch request operation exceeds the maximum 100 changes per change set.")
	errInvalidURI        = newErr(http.StatusBadRequest, "InvalidUri", "The requested URI does not represent any resource on the server.")
	errVerb              = newErr(http.StatusMethodNotAllowed, "UnsupportedHttpVerb", "The resource doesn't support specified Http Verb.")
	errFormat            = newErr(http.StatusUnsupportedMediaType, "AtomFormatNotSupported", "Atom format is not supported.")
	errBusy              = newErr(http.StatusServiceUnavailable, "ServerBusy", "The server is currently unable to receive requests. Please retry your request.")
	errInternal          = newErr(http.StatusInternalServerError, "InternalError", "The server encountered an internal error. Please retry the request.")
	errTimeout           = newErr(http.StatusInternalServerError, "OperationTimedOut", "The operation could not be completed within the permitted time.")
	errInvalidXML        = newErr(http.StatusBadRequest, "InvalidXmlDocument", "XML specified is not syntactically valid.")
	errNoPolicies        = newErr(http.StatusNotImplemented, "NotImplemented", "nemo keeps no stored access policies: set them on the storage account itself (a SAS naming one is refused here).")
	errNoServiceSettings = newErr(http.StatusNotImplemented, "NotImplemented", "nemo keeps no analytics logging, metrics or CORS rules: set them on the storage account itself.")
	errPreflightHeaders  = newErr(http.StatusBadRequest, "InvalidHeaderValue", "A CORS preflight request needs the Origin and Access-Control-Request-Method headers.")
	errPreflightFailed   = newErr(http.StatusForbidden, "CorsPreflightFailure", "CORS not enabled or no matching rule found for this request.")
	errNoContentType     = newErr(http.StatusBadRequest, "InvalidInput", "Content-Type header value missing.")
	errInvalidQueryParam = newErr(http.StatusBadRequest, "InvalidQueryParameterValue", "Value for one of the query parameters specified in the request URI is invalid.")
)

// errSourceIP refuses a SAS request from outside the signed IP range; the
// service's message names the address.
func errSourceIP(src netip.Addr) *apiError {
	return newErr(http.StatusForbidden, "AuthorizationSourceIPMismatch",
		"This request is not authorized to perform this operation using this source IP "+src.String()+".")
}

// codecError maps a tablecodec validation error of a payload. A key or
// value out of range is named in the message with its value, as the
// service names them ("The 'RowKey' parameter of value 'a/b' is out of
// range."); a key over 1 KiB is a value too large, as in the service.
func codecError(err error) *apiError {
	var pe *tablecodec.PropertyError
	switch {
	case errors.Is(err, tablecodec.ErrMissingKey):
		return errNeedKeys.because(err)
	case errors.Is(err, tablecodec.ErrKeyTooLong):
		return errPropTooLarge.because(err)
	case (errors.Is(err, tablecodec.ErrInvalidKey) || errors.Is(err, tablecodec.ErrValueOutOfRange)) && errors.As(err, &pe):
		return newErr(http.StatusBadRequest, "OutOfRangeInput",
			"The '"+pe.Property+"' parameter of value '"+pe.Value+"' is out of range.").because(err)
	case errors.Is(err, tablecodec.ErrDuplicateProperty):
		return errDuplicateProps.because(err)
	case errors.Is(err, tablecodec.ErrPropertyNameInvalid):
		return errPropName.because(err)
	case errors.Is(err, tablecodec.ErrPropertyNameTooLong):
		return errPropNameLong.because(err)
	case errors.Is(err, tablecodec.ErrTooManyProperties):
		return errTooManyProps.because(err)
	case errors.Is(err, tablecodec.ErrPropertyValueTooLarge):
		return errPropTooLarge.because(err)
	case errors.Is(err, tablecodec.ErrEntityTooLarge):
		return errEntityTooLarge.because(err)
	}
	return errInvalidInput.because(err)
}

// urlKeyError maps the validation error of a key addressed in a URL
// (updates, deletes), which the service refuses while parsing the URL: a
// slash or backslash is a query syntax error, another forbidden
// character a generic out-of-range input, without the value.
func urlKeyError(err error, key string) *apiError {
	switch {
	case errors.Is(err, tablecodec.ErrKeyTooLong):
		return errPropTooLarge.because(err)
	case strings.ContainsAny(key, `/\`):
		return errQuerySyntax.because(err)
	}
	return errOutOfRange.because(err)
}

// engineError maps an engine failure. A lock conflict that outlived the
// engine's retries becomes 503 ServerBusy: clients retry it on their own,
// and no Azure client expects a 409 from a plain write.
func engineError(err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, txn.ErrNotLeaseHolder):
		// Coherence exclusive, and another nemo holds the table: not
		// retryable here (the client must go through that nemo, or the
		// deployment must use coherence shared). Azure Storage's own
		// code for a lease held by someone else.
		return newErr(http.StatusConflict, "LeaseAlreadyPresent",
			"This nemo may not write the table: "+err.Error()+". Use the nemo that holds the lease, or coherence.mode shared.").because(err)
	case errors.Is(err, txn.ErrOneKeyspace):
		// Not retryable; unreachable through the Azure API, whose every
		// request writes one table.
		return errInvalidInput.because(err)
	case errors.Is(err, txn.ErrOwnerUnavailable):
		// Coherence partitioned: the nemo that owns the table did not
		// answer; nothing was written (a commit whose answer was lost
		// is adapters.ErrUnknownOutcome, below).
		return errBusy.because(err)
	case errors.Is(err, adapters.ErrUnknownOutcome):
		// A write the store may or may not have applied: the service's
		// own answer for that (a 503 would say it was not).
		return errTimeout.because(err)
	case errors.Is(err, txn.ErrConflict), errors.Is(err, txn.ErrAborted), errors.Is(err, txn.ErrClosed),
		errors.Is(err, txn.ErrLeaseUnavailable), // this nemo's own lease, unconfirmed in a backend outage
		errors.Is(err, txn.ErrBufferClosed), errors.Is(err, adapters.ErrUnavailable),
		errors.Is(err, txn.ErrBackpressure), errors.Is(err, txn.ErrCommitLog):
		return errBusy.because(err)
	case errors.Is(err, context.DeadlineExceeded):
		return errTimeout.because(err)
	case errors.Is(err, txn.ErrValueTooLarge):
		return errEntityTooLarge.because(err)
	case errors.Is(err, txn.ErrKeyTooLarge), errors.Is(err, txn.ErrInvalidKey):
		return errOutOfRange.because(err)
	case errors.Is(err, txn.ErrUnknownKeyspace):
		return errTableNotFound.because(err)
	case errors.Is(err, odata.ErrInvalidFilter):
		return errBadQuery.because(err)
	}
	return errInternal.because(err)
}

// xmlErrorBody is the service's XML (OData Atom) error document, which it
// answers when the client asked for a format other than JSON.
func xmlErrorBody(code, msg, requestID string, now time.Time) []byte {
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="utf-8"?><error xmlns="http://schemas.microsoft.com/ado/2007/08/dataservices/metadata"><code>`)
	_ = xml.EscapeText(&b, []byte(code))
	b.WriteString(`</code><message xml:lang="en-US">`)
	_ = xml.EscapeText(&b, []byte(msg+"\nRequestId:"+requestID+"\nTime:"+now.UTC().Format("2006-01-02T15:04:05.0000000Z")))
	b.WriteString(`</message></error>`)
	return b.Bytes()
}

// errorBody is the service's JSON error document.
func errorBody(code, msg, requestID string, now time.Time) []byte {
	c, _ := json.Marshal(code)
	m, _ := json.Marshal(msg + "\nRequestId:" + requestID + "\nTime:" + now.UTC().Format("2006-01-02T15:04:05.000Z"))
	b := append([]byte(`{"odata.error":{"code":`), c...)
	b = append(b, `,"message":{"lang":"en-US","value":`...)
	b = append(b, m...)
	return append(b, "}}}"...)
}
