// Package tablecodec holds nemo's codecs for Azure Table entities: an
// order-preserving key codec that turns (PartitionKey, RowKey) into one byte
// string whose bytes.Compare order equals Azure's own (PartitionKey first,
// then RowKey, each compared ordinally by UTF-8 bytes), a compact binary value
// codec that round-trips every Edm property type together with the entity's
// ETag and Timestamp, and the JSON conversion the REST frontend and the
// aztables adapter need (Azure's request payload rules on the way in, its
// nometadata / minimalmetadata / fullmetadata shapes on the way out), with
// Azure's property-name and size limits enforced as typed errors. Payloads
// are read by a one-pass scanner (jsonscan.go) that accepts, decodes and
// refuses exactly as encoding/json's Decoder.Token walk does; that walk is
// kept in json_ref_test.go as the oracle of a differential fuzz target. It
// imports nothing of nemo's, so both the engine-facing adapter and the
// frontend can share it.
package tablecodec
