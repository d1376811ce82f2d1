// Package batch reads and writes the multipart/mixed bodies of the Azure
// Table $batch operation (entity group transactions): a batch holding one
// changeset whose parts are application/http requests, and the matching
// batchresponse / changesetresponse body. It only handles the wire format;
// the frontend decides what the operations mean and runs them as one
// engine transaction. The parser is strict about structure and bounded in
// what it accepts, since the body comes straight from the network.
package batch
