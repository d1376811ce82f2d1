// Smoke test of nemo's Datastore frontend with the Node client
// (@google-cloud/datastore). Run by TestNodeSmoke with
// DATASTORE_EMULATOR_HOST pointing at nemo; exits non-zero on any failure.
'use strict';
const assert = require('assert');
const {Datastore, PropertyFilter, or, and} = require('@google-cloud/datastore');

async function main() {
  const ds = new Datastore({projectId: process.env.DATASTORE_PROJECT_ID});
  const key = ds.key(['Task', 'one']);
  await ds.save({key, data: {title: 'one', n: 1, tags: ['a', 'b'], done: false}});
  const [got] = await ds.get(key);
  assert.strictEqual(got.title, 'one');
  assert.deepStrictEqual(got.tags, ['a', 'b']);

  const [missing] = await ds.get(ds.key(['Task', 'nope']));
  assert.strictEqual(missing, undefined);

  const incomplete = ds.key('Task');
  await ds.save({key: incomplete, data: {title: 'auto', n: 5, done: true}});
  assert.ok(incomplete.id, 'the incomplete key was completed');

  const tasks = [];
  for (let i = 10; i < 15; i++) {
    tasks.push({key: ds.key(['Task', i]), data: {title: 't' + i, n: i, done: i % 2 === 0}});
  }
  await ds.save(tasks);

  const [gt] = await ds.runQuery(ds.createQuery('Task').filter(new PropertyFilter('n', '>', 11)).order('n', {descending: true}));
  assert.deepStrictEqual(gt.map(e => e.n), [14, 13, 12]);

  const [ors] = await ds.runQuery(ds.createQuery('Task').filter(or([
    new PropertyFilter('n', '=', 1), new PropertyFilter('title', '=', 't13')])));
  assert.deepStrictEqual(ors.map(e => e.title).sort(), ['one', 't13']);

  const [page, info] = await ds.runQuery(ds.createQuery('Task').order('n').limit(2));
  assert.deepStrictEqual(page.map(e => e.n), [1, 5]);
  const [rest] = await ds.runQuery(ds.createQuery('Task').order('n').start(info.endCursor));
  assert.deepStrictEqual(rest.map(e => e.n), [10, 11, 12, 13, 14]);

  const [keys] = await ds.runQuery(ds.createQuery('Task').select('__key__').filter(and([
    new PropertyFilter('done', '=', true), new PropertyFilter('n', '<', 14)])));
  assert.strictEqual(keys.length, 3);

  const agg = ds.createAggregationQuery(ds.createQuery('Task')).count('total').sum('n', 'sum');
  const [[res]] = await ds.runAggregationQuery(agg);
  assert.strictEqual(Number(res.total), 7);
  assert.strictEqual(Number(res.sum), 66);

  const counter = ds.key(['Counter', 'c']);
  for (let i = 0; i < 3; i++) {
    const tx = ds.transaction();
    await tx.run();
    const [c] = await tx.get(counter);
    tx.save({key: counter, data: {n: (c ? c.n : 0) + 1}});
    await tx.commit();
  }
  const [c] = await ds.get(counter);
  assert.strictEqual(c.n, 3);

  await ds.delete(key);
  const [gone] = await ds.get(key);
  assert.strictEqual(gone, undefined);
  console.log('node smoke ok');
}

main().catch(err => {
  console.error(err);
  process.exit(1);
});
