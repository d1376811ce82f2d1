package aztable

import (
	"context"
	"errors"
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/adapters"
)

// How a Store's requests authenticate (Auth).
const (
	authAccountKey        = "account key"
	authSAS               = "shared access signature"
	authToken             = "token credential"
	authDefaultCredential = "Azure default credential chain"
)

var _ adapters.Pinger = (*Store)(nil)

// Ping implements adapters.Pinger: it lists at most one table (Query
// Tables with $top=1), which every credential nemo can use must be
// allowed to do (nemo lists and creates tables for its clients). A key,
// signature or token the service refuses fails with adapters.ErrAccessDenied,
// and so does a token the identity provider refuses to issue
// (azidentity.AuthenticationFailedError); a service that does not answer
// fails with adapters.ErrUnavailable, after the client's retries, or with
// ctx's error.
func (s *Store) Ping(ctx context.Context) error {
	top := int32(1)
	pager := s.svc.NewListTablesPager(&aztables.ListTablesOptions{Top: &top})
	_, err := pager.NextPage(ctx)
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*azidentity.AuthenticationFailedError](err); ok {
		return fmt.Errorf("aztable: ping: %w: %w", adapters.ErrAccessDenied, err)
	}
	return classify("ping", err)
}

// Endpoint is the table endpoint the Store sends its requests to.
func (s *Store) Endpoint() string { return s.endpoint }

// Auth says how the Store's requests authenticate: "account key", "shared
// access signature", "token credential" or "Azure default credential
// chain".
func (s *Store) Auth() string { return s.auth }
