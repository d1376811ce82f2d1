// What the Node client (@google-cloud/datastore) can do to send nemo's
// Datastore token (frontend.datastore.token) from a host that is not on
// loopback. Run by TestTokenNodeClient with DATASTORE_EMULATOR_HOST
// pointing at nemo on a non-loopback address and NEMO_TOKEN set; exits
// non-zero on any failure.
//
// Over gRPC the client connects to an emulator host with insecure channel
// credentials, and grpc-js refuses to compose call credentials with those,
// so no client-wide option adds the token: it goes per call, in
// gaxOptions.otherArgs.headers. Over REST (fallback: 'rest') the client
// sends its auth client's access token on every call.
'use strict';
const assert = require('assert');
const {Datastore} = require('@google-cloud/datastore');
const {OAuth2Client} = require('google-auth-library');

const project = process.env.DATASTORE_PROJECT_ID;
const token = process.env.NEMO_TOKEN;
const UNAUTHENTICATED = 16;

// perCall is the gaxOptions that carry the token on one gRPC call.
const perCall = t => ({otherArgs: {headers: {authorization: 'Bearer ' + t}}});

async function refused(what, p) {
  await assert.rejects(p, e => e.code === UNAUTHENTICATED || e.code === 401, what + ' was not refused');
}

async function main() {
  // gRPC, as DATASTORE_EMULATOR_HOST sets the client up.
  const ds = new Datastore({projectId: project});
  const key = ds.key(['Task', 'grpc']);
  await refused('a save without the token', ds.save({key, data: {n: 1}}));
  await refused('a save with a wrong token', ds.save({key, data: {n: 1}}, perCall(token + 'x')));
  await ds.save({key, data: {n: 1}}, perCall(token));
  const [got] = await ds.get(key, {gaxOptions: perCall(token)});
  assert.strictEqual(got.n, 1);
  const [rows] = await ds.runQuery(ds.createQuery('Task'), {gaxOptions: perCall(token)});
  assert.strictEqual(rows.length, 1);

  // REST, with an auth client that holds the token.
  const rest = t => {
    const auth = new OAuth2Client();
    auth.setCredentials({access_token: t, expiry_date: Date.now() + 3600 * 1000});
    return new Datastore({projectId: project, apiEndpoint: process.env.DATASTORE_EMULATOR_HOST,
      fallback: 'rest', protocol: 'http', authClient: auth});
  };
  const bad = rest(token + 'x');
  await refused('a REST save with a wrong token', bad.save({key: bad.key(['Task', 'rest']), data: {n: 2}}));
  const good = rest(token);
  const rkey = good.key(['Task', 'rest']);
  await good.save({key: rkey, data: {n: 2}});
  const [rgot] = await good.get(rkey);
  assert.strictEqual(rgot.n, 2);
  const [all] = await good.runQuery(good.createQuery('Task'));
  assert.strictEqual(all.length, 2);
  console.log('ok: per-call gRPC headers and the REST transport with an auth client both carry the token');
}

main().catch(e => {
  console.error(e);
  process.exit(1);
});
