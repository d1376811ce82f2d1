"""Conversation of the Python Tables SDK (azure-data-tables, Debian's
python3-azure) with an Azure Table endpoint.

TestPythonSDK runs it with /usr/bin/python3 against Azurite and against
nemo, and compares what it prints: one JSON line per step, the step's
outcome (its answer, or the status and error code of its failure), with
ETags, timestamps and the table's name made independent of the run.

    NEMO_URL=http://127.0.0.1:port/devstoreaccount1 NEMO_ACCOUNT=... \
    NEMO_KEY=... NEMO_TABLE=name python3 smoke.py
"""
import base64
import datetime
import json
import os
import sys
import uuid

from azure.core import MatchConditions
from azure.core.credentials import AzureNamedKeyCredential
from azure.core.exceptions import HttpResponseError
from azure.data.tables import (EdmType, EntityProperty, TableServiceClient,
                               TableTransactionError, UpdateMode)

URL = os.environ["NEMO_URL"]
TABLE = os.environ["NEMO_TABLE"]
cred = AzureNamedKeyCredential(os.environ["NEMO_ACCOUNT"], os.environ["NEMO_KEY"])
# No retries: a retried write could hide the first answer.
svc = TableServiceClient(endpoint=URL, credential=cred, retry_total=0)
tc = svc.get_table_client(TABLE)


def plain(v):
    """A property value as JSON, with its Python type, so that a type
    the SDK decodes differently shows in the comparison."""
    if isinstance(v, EntityProperty):
        return {"edm": str(v.edm_type.value if hasattr(v.edm_type, "value") else v.edm_type), "value": plain(v.value)}
    if isinstance(v, bool):
        return {"bool": v}
    if isinstance(v, int):
        return {"int": v}
    if isinstance(v, float):
        return {"float": v}
    if isinstance(v, datetime.datetime):
        return {"datetime": v.isoformat()}
    if isinstance(v, uuid.UUID):
        return {"guid": str(v)}
    if isinstance(v, bytes):
        return {"bytes": base64.b64encode(v).decode()}
    if isinstance(v, str):
        return {"str": v}
    return {type(v).__name__: repr(v)}


def entity(e):
    out = {k: plain(v) for k, v in sorted(e.items())}
    md = e.metadata
    out["@etag"] = "set" if md.get("etag") else "missing"
    out["@timestamp"] = "set" if md.get("timestamp") else "missing"
    return out


def step(name, fn):
    try:
        got = fn()
        rec = {"step": name, "ok": got}
    except TableTransactionError as ex:
        rec = {"step": name, "status": ex.status_code, "code": str(ex.error_code), "index": ex.index}
    except HttpResponseError as ex:
        code = ex.response.headers.get("x-ms-error-code") if ex.response is not None else None
        rec = {"step": name, "status": ex.status_code, "code": code}
    print(json.dumps(rec, sort_keys=True))
    sys.stdout.flush()


def written(md):
    """The answer of a write: that it carried an ETag (its value differs
    between stores)."""
    return {"etag": "set" if md.get("etag") else "missing"}


WHEN = datetime.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=datetime.timezone.utc)
GUID = uuid.UUID("0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0")
TYPED = {
    "PartitionKey": "p", "RowKey": "r1",
    "Str": "hé 'q' \"x\" / ?#", "I32": 42, "I64": EntityProperty(1234567890123, EdmType.INT64),
    "Dbl": 2.5, "Whole": 7.0, "Bool": True, "When": WHEN, "Guid": GUID, "Bin": b"\x00\x01\xfa",
}

step("create table", lambda: svc.create_table(TABLE).table_name == TABLE)
step("create table again", lambda: svc.create_table(TABLE).table_name)
step("create entity", lambda: written(tc.create_entity(TYPED)))
step("create entity again", lambda: written(tc.create_entity(TYPED)))
step("get entity", lambda: entity(tc.get_entity("p", "r1")))
step("get entity selected", lambda: entity(tc.get_entity("p", "r1", select=["Str", "I64"])))
step("get missing entity", lambda: entity(tc.get_entity("p", "nope")))
step("upsert merge", lambda: written(tc.upsert_entity({"PartitionKey": "p", "RowKey": "r1", "Extra": "x"}, mode=UpdateMode.MERGE)))
step("get after merge", lambda: entity(tc.get_entity("p", "r1")))

stale = tc.get_entity("p", "r1").metadata["etag"]
step("replace if match", lambda: written(tc.update_entity({"PartitionKey": "p", "RowKey": "r1", "I32": 2}, mode=UpdateMode.REPLACE, etag=stale, match_condition=MatchConditions.IfNotModified)))
step("get after replace", lambda: entity(tc.get_entity("p", "r1")))
step("merge with a stale etag", lambda: written(tc.update_entity({"PartitionKey": "p", "RowKey": "r1", "I32": 3}, mode=UpdateMode.MERGE, etag=stale, match_condition=MatchConditions.IfNotModified)))
step("update missing entity", lambda: written(tc.update_entity({"PartitionKey": "p", "RowKey": "nope", "I32": 3}, mode=UpdateMode.MERGE)))
step("delete with a stale etag", lambda: tc.delete_entity("p", "r1", etag=stale, match_condition=MatchConditions.IfNotModified))
step("upsert replace new", lambda: written(tc.upsert_entity({"PartitionKey": "p", "RowKey": "r2", "N": 1}, mode=UpdateMode.REPLACE)))
step("delete unconditionally", lambda: tc.delete_entity("p", "r2"))
step("get deleted entity", lambda: entity(tc.get_entity("p", "r2")))

step("batch of creates and an upsert", lambda: [written(md) for md in tc.submit_transaction(
    [("create", {"PartitionKey": "b", "RowKey": "%02d" % i, "N": i, "Odd": i % 2 == 1}) for i in range(6)]
    + [("upsert", {"PartitionKey": "b", "RowKey": "10", "N": 10, "Odd": False})])])
step("batch failing at its third operation", lambda: tc.submit_transaction(
    [("create", {"PartitionKey": "b", "RowKey": "20"}), ("update", {"PartitionKey": "b", "RowKey": "01", "N": 100}),
     ("create", {"PartitionKey": "b", "RowKey": "02"})]))
step("batch applied nothing", lambda: [entity(e) for e in tc.query_entities("PartitionKey eq 'b' and (RowKey eq '20' or N eq 100)")])
step("batch deleting a missing entity", lambda: tc.submit_transaction([("delete", {"PartitionKey": "b", "RowKey": "99"})]))

step("query pages of 2", lambda: [entity(e) for e in tc.query_entities("PartitionKey eq @pk", parameters={"pk": "b"}, results_per_page=2)])
step("query odd ones, selected", lambda: [entity(e) for e in tc.query_entities("PartitionKey eq 'b' and Odd eq true", select=["N"])])
step("query a range", lambda: [entity(e) for e in tc.query_entities("PartitionKey eq 'b' and RowKey gt '01' and RowKey le '04'")])
step("create a typed entity", lambda: written(tc.create_entity(dict(TYPED, PartitionKey="t"))))
step("query typed", lambda: [entity(e) for e in tc.query_entities(
    "When eq @w and Guid eq @g and I64 eq @i and Bin eq @b and Dbl gt @d", parameters={"w": WHEN, "g": GUID, "i": 1234567890123, "b": b"\x00\x01\xfa", "d": 2.25})])
step("query typed, not matching", lambda: [entity(e) for e in tc.query_entities(
    "PartitionKey eq 't' and When lt @w or PartitionKey eq 't' and I64 gt @i", parameters={"w": WHEN, "i": 1234567890123})])
step("query nothing", lambda: [entity(e) for e in tc.query_entities("PartitionKey eq 'none'")])
step("query a bad filter", lambda: [entity(e) for e in tc.query_entities("PartitionKey eq")])
step("list entities, top 3", lambda: [entity(e) for e in tc.list_entities(results_per_page=3)])

step("list tables by name", lambda: [t.name == TABLE for t in svc.query_tables("TableName eq @n", parameters={"n": TABLE})])
step("delete table", lambda: svc.delete_table(TABLE))
step("get from the deleted table", lambda: entity(tc.get_entity("p", "r1")))
step("create entity in the deleted table", lambda: written(tc.create_entity({"PartitionKey": "p", "RowKey": "r1"})))
