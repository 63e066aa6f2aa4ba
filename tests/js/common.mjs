// What every client script shares: its command line, the one JSON line it prints, the API
// versions it sent, records in the one shape tests/test_js_clients.py compares, and the
// scenarios whose steps are the same for every client (run on the client's adapter).
//
// Usage of a client script: node <client>.mjs <bootstrap> <scenario> <topic> <group>
// It prints one line: {"ok": true, "result": {...}, "versions": {"<api key>": [versions]}}
// or {"ok": false, "error": "...", "causes": [...], "versions": {...}} and exits 0 either
// way, so a failure shows the client's own error in the test. A result {"unsupported":
// reason} is a feature the client lacks (the test skips with that reason).

export const [bootstrap, scenario, topic, group] = process.argv.slice(2)
export const CLIENT_ID = 'sparklog-js-tests'
const CODECS = ['gzip', 'snappy', 'lz4', 'zstd']

const sent = new Map()

/** Remember one request the client sent (API key, version). */
export function recordRequest (apiKey, apiVersion) {
  if (!sent.has(apiKey)) sent.set(apiKey, new Set())
  sent.get(apiKey).add(apiVersion)
}

function versions () {
  return Object.fromEntries([...sent].map(([key, set]) => [key, [...set].sort((a, b) => a - b)]))
}

/** A consumed record as the test compares it: strings (or null), header pairs in order. */
export function rec ({ partition, offset, key, value, headers }) {
  const text = b => (b === null || b === undefined ? null : Buffer.from(b).toString())
  return { partition, offset: Number(offset), key: text(key), value: text(value), headers: headers.map(([k, v]) => [text(k), text(v)]) }
}

/**
 * Records to produce: ``count`` numbered values from ``start``, keyed k0..k2. A record to
 * produce is {key, value, headers: [[k, v]...], timestamp (ms, optional)}.
 */
export function numbered (count, start = 0) {
  return Array.from({ length: count }, (_, i) => ({ key: `k${(start + i) % 3}`, value: `${start + i}`, headers: [] }))
}

function sleep (ms) {
  return new Promise(resolve => setTimeout(resolve, ms))
}

/** Resolve when ``condition()`` holds, polling; reject after ``ms``. */
export async function until (condition, what, ms = 15000) {
  const deadline = Date.now() + ms
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(50)
  }
}

/**
 * The scenarios that are the same steps for every client, on its adapter:
 * - ``admin()``: a client with ``listTopics()`` and ``deleteTopics({ topics })``;
 * - ``createTopic(partitions)``;
 * - ``producer(kind)``: a producer, ``kind`` 'plain', 'idempotent' or 'transactional';
 * - ``produce(records, { acks, codec }, producer?)``: the acknowledged [{topic, partition, offset}];
 * - ``transaction(producer, records, commit)``;
 * - ``consume(count, { commitAt, groupId, readCommitted })``: ``count`` records read by a
 *   new group member (from the group's committed offset, else the earliest), committing
 *   after the ``commitAt``th;
 * - ``codecSupport(codec)``: null, or why the client cannot compress with ``codec``.
 */
export function sharedScenarios (client) {
  const { admin, createTopic, producer, produce, transaction, consume, codecSupport } = client

  async function produceAndConsume (kind, send) {
    await createTopic(1)
    const records = numbered(10)
    const once = await producer(kind) // one producer: one producer id and its sequences
    const offsets = await produce(records.slice(0, 5), send, once)
    offsets.push(...await produce(records.slice(5), send, once))
    return { offsets, records: await consume(10) }
  }

  async function compressed (codec) {
    const unsupported = codecSupport(codec)
    if (unsupported) return { unsupported }
    await createTopic(1)
    await produce(numbered(50).map(r => ({ ...r, value: r.value + ' lorem ipsum'.repeat(20) })), { codec })
    return { records: await consume(50) }
  }

  return {
    async delete_topic () {
      await createTopic(1)
      const admins = await admin()
      const before = (await admins.listTopics()).includes(topic)
      await admins.deleteTopics({ topics: [topic] })
      await until(async () => !(await admins.listTopics()).includes(topic), 'the deleted topic to go')
      return { before, after: (await admins.listTopics()).includes(topic) }
    },
    produce_acks1: () => produceAndConsume('plain', { acks: 1 }),
    produce_acks_all: () => produceAndConsume('plain', { acks: -1 }),
    idempotent: () => produceAndConsume('idempotent', { acks: -1 }),
    async consume_earliest () {
      await createTopic(1)
      for (let i = 0; i < 4; i++) await produce(numbered(5, i * 5))
      return { records: await consume(20) }
    },
    async group_first_run () {
      await createTopic(1)
      await produce(numbered(10))
      return { records: await consume(4, { commitAt: 4 }) }
    },
    async group_second_run () {
      await produce(numbered(5, 10))
      return { records: await consume(11) }
    },
    async transactions () {
      await createTopic(1)
      const transactional = await producer('transactional')
      await transaction(transactional, numbered(3, 0), true)
      await transaction(transactional, numbered(3, 3), false)
      await transaction(transactional, numbered(3, 6), true)
      return {
        committed: await consume(6, { groupId: `${topic}-rc`, readCommitted: true }),
        uncommitted: await consume(9, { groupId: `${topic}-ru`, readCommitted: false })
      }
    },
    async headers_keys () {
      await createTopic(1)
      await produce([
        { key: 'user-1', value: 'a', headers: [['trace', 't1'], ['source', 'web']] },
        { key: null, value: 'b', headers: [['empty', '']] },
        { key: 'user-2', value: 'c', headers: [] }
      ])
      return { records: await consume(3) }
    },
    ...Object.fromEntries(CODECS.map(codec => [`compression_${codec}`, () => compressed(codec)]))
  }
}

/** Run the scenario named on the command line and print its one JSON line. */
export async function main (scenarios) {
  const run = scenarios[scenario]
  let line
  try {
    if (!run) throw new Error(`unknown scenario ${scenario}`)
    line = { ok: true, result: await run() }
  } catch (error) {
    const causes = error.errors ? error.errors.map(e => String(e.message || e)) : []
    line = { ok: false, error: `${error.name}: ${error.message}`, causes }
  }
  line.versions = versions()
  process.stdout.write(JSON.stringify(line, (_, v) => (typeof v === 'bigint' ? Number(v) : v)) + '\n')
  process.exit(0)
}
