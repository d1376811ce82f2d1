// Package aztable is nemo's Azure Table Storage frontend: the service's
// REST protocol, served path-style under /<account>/ as Azurite does, so
// the aztables SDKs and connection strings written for Azurite work
// unchanged. It verifies Shared Key and Shared Key Lite signatures and
// shared access signatures (sas.go: account and table SAS, their
// permissions and a table SAS's key range enforced per entity); under
// Options.RequireSAS a client that is not on loopback (by its connection's
// peer address) must use a SAS. It speaks JSON at the three OData
// metadata levels, generates ETags and Timestamps,
// honours If-Match and OData's method tunnelling (a POST naming MERGE,
// PATCH, PUT or DELETE in X-HTTP-Method), evaluates $filter / $select /
// $top with continuation, bounds a request by its timeout parameter,
// runs $batch changesets as one engine transaction (each operation
// answered at the metadata level it asks for, with its Content-ID) and
// answers a batch's lone retrieve (a point query outside a changeset), and
// answers every failure with the service's odata.error body. What it does
// with each query option and header is in docs/azure.md. Each table is one engine
// keyspace (the table name); the table list itself is the system keyspace
// tablecodec.TablesKeyspace. Queries whose filter pins a key range read
// exactly that range through the buffer; other predicates are evaluated
// here over the covering range, so every answer reflects every committed
// write.
//
// A read answered from the buffer is not decoded: its JSON is written
// straight from the stored value (tablecodec.AppendValueJSON), and the
// bodies of hot point reads are kept in a small cache (bodycache.go), each
// used only while the buffer holds the very version it was written from
// (same ETag and same value hash). The cache's bytes come out of the
// buffer's budget (config.Config.AzureBodyCacheBytes). Signature checks
// use pooled HMACs.
//
// Lock order: the body cache's mutex and the HMAC pool are leaves; the
// frontend holds no other lock (the engine's are its own).
package aztable
