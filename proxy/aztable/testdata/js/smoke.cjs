// Smoke test of nemo's Azure Table frontend with the JavaScript SDK
// (@azure/data-tables). TestJSSmoke runs it with node:
//   NEMO_URL=http://127.0.0.1:port/devstoreaccount1 NEMO_ACCOUNT=... NEMO_KEY=...
// It exits non-zero on the first failed check.
"use strict";
const { TableServiceClient, TableClient, AzureNamedKeyCredential, odata } = require("@azure/data-tables");
const assert = require("node:assert/strict");

const url = process.env.NEMO_URL;
const account = process.env.NEMO_ACCOUNT;
const key = process.env.NEMO_KEY;
const opts = { allowInsecureConnection: true, retryOptions: { maxRetries: 0 } };
const cred = new AzureNamedKeyCredential(account, key);

async function status(p) {
  try {
    await p;
    return 0;
  } catch (e) {
    return e.statusCode;
  }
}

async function main() {
  const svc = new TableServiceClient(url, cred, opts);
  const name = "js" + Date.now().toString(36);
  await svc.createTable(name);
  const tc = new TableClient(url, name, cred, opts);

  const when = new Date("2024-05-06T07:08:09.123Z");
  await tc.createEntity({
    partitionKey: "p", rowKey: "r1", n: 1, s: "hé 'q'", b: true, d: 2.5, when,
    big: { value: "1234567890123", type: "Int64" },
    bin: new Uint8Array([0, 1, 250]),
  });
  assert.equal(await status(tc.createEntity({ partitionKey: "p", rowKey: "r1" })), 409, "duplicate insert");

  let e = await tc.getEntity("p", "r1");
  assert.equal(e.n, 1);
  assert.equal(e.s, "hé 'q'");
  assert.equal(e.b, true);
  assert.equal(e.d, 2.5);
  assert.equal(e.when.getTime(), when.getTime());
  assert.equal(e.big, 1234567890123n, "Edm.Int64 comes back as a BigInt");
  assert.deepEqual(Array.from(e.bin), [0, 1, 250]);
  assert.ok(e.etag && e.timestamp, "etag and timestamp");
  assert.equal(await status(tc.getEntity("p", "nope")), 404, "missing entity");

  await tc.upsertEntity({ partitionKey: "p", rowKey: "r1", extra: "x" }, "Merge");
  e = await tc.getEntity("p", "r1");
  assert.equal(e.extra, "x");
  assert.equal(e.n, 1, "merge keeps other properties");
  const stale = e.etag;
  await tc.updateEntity({ partitionKey: "p", rowKey: "r1", n: 2 }, "Replace", { etag: e.etag });
  e = await tc.getEntity("p", "r1");
  assert.equal(e.n, 2);
  assert.equal(e.extra, undefined, "replace drops properties");
  assert.equal(await status(tc.updateEntity({ partitionKey: "p", rowKey: "r1", n: 3 }, "Merge", { etag: stale })), 412, "stale etag");

  for (let i = 0; i < 5; i++) {
    await tc.upsertEntity({ partitionKey: "list", rowKey: "r" + i, i });
  }
  const pages = [];
  const iter = tc.listEntities({ queryOptions: { filter: odata`PartitionKey eq ${"list"} and i ge ${1}`, select: ["rowKey", "i"] } }).byPage({ maxPageSize: 2 });
  for await (const page of iter) {
    pages.push(page.map((x) => x.rowKey).join(","));
  }
  assert.deepEqual(pages, ["r1,r2", "r3,r4"], "filtered, paged query");

  await tc.submitTransaction([
    ["create", { partitionKey: "tx", rowKey: "a", v: 1 }],
    ["upsert", { partitionKey: "tx", rowKey: "b", v: 2 }, "Replace"],
  ]);
  assert.notEqual(await status(tc.submitTransaction([
    ["create", { partitionKey: "tx", rowKey: "c", v: 3 }],
    ["create", { partitionKey: "tx", rowKey: "a", v: 1 }],
  ])), 0, "a failing transaction fails");
  assert.equal(await status(tc.getEntity("tx", "c")), 404, "the failed transaction was rolled back");
  const tx = [];
  for await (const x of tc.listEntities({ queryOptions: { filter: odata`PartitionKey eq ${"tx"}` } })) {
    tx.push(x.rowKey + "=" + x.v);
  }
  assert.deepEqual(tx, ["a=1", "b=2"]);

  await tc.deleteEntity("p", "r1");
  assert.equal(await status(tc.deleteEntity("p", "r1")), 404, "delete twice");

  const tables = [];
  for await (const t of svc.listTables({ queryOptions: { filter: odata`TableName eq ${name}` } })) {
    tables.push(t.name);
  }
  assert.deepEqual(tables, [name]);

  const bad = new TableClient(url, name, new AzureNamedKeyCredential(account, "AAAA" + key.slice(4)), opts);
  assert.equal(await status(bad.getEntity("tx", "a")), 403, "wrong key");

  await svc.deleteTable(name);
  assert.equal(await status(tc.getEntity("tx", "a")), 404, "deleted table");
  console.log("js smoke: ok");
}

main().catch((err) => {
  console.error("js smoke: FAILED:", err);
  process.exit(1);
});
