// The scenarios of tests/test_js_clients.py with kafkajs 2.2.4 (pure JavaScript, Kafka 2.x
// protocol: ApiVersions v2 (it predates KIP-511), then the highest version of each API both
// sides know). Every request's (API key, version) is taken from the clients' REQUEST events.
import kafkajs from 'kafkajs'
import { CLIENT_ID, bootstrap, group, main, numbered, rec, recordRequest, sharedScenarios, topic, until } from './common.mjs'

const { AssignerProtocol, CompressionTypes, ConfigResourceTypes, Kafka, logLevel } = kafkajs

const kafka = new Kafka({
  clientId: CLIENT_ID,
  brokers: [bootstrap],
  logLevel: logLevel.NOTHING,
  connectionTimeout: 5000,
  requestTimeout: 10000,
  retry: { retries: 2, initialRetryTime: 100 }
})
const PRODUCERS = {
  plain: {},
  idempotent: { idempotent: true, maxInFlightRequests: 1 },
  transactional: { idempotent: true, maxInFlightRequests: 1, transactionalId: `${topic}-txn` }
}

/** A connected client (admin, producer or consumer) whose requests are recorded. */
async function connected (kafkaClient) {
  kafkaClient.on(kafkaClient.events.REQUEST, ({ payload }) => recordRequest(payload.apiKey, payload.apiVersion))
  await kafkaClient.connect()
  return kafkaClient
}

const admin = () => connected(kafka.admin())
const member = (options = {}) => connected(kafka.consumer({
  groupId: group,
  sessionTimeout: 6000,
  rebalanceTimeout: 6000,
  heartbeatInterval: 500,
  maxWaitTimeInMs: 200,
  ...options
}))

const asMessages = records => records.map(r => ({
  key: r.key,
  value: r.value,
  headers: Object.fromEntries(r.headers),
  ...(r.timestamp === undefined ? {} : { timestamp: String(r.timestamp) })
}))

/** Header pairs of a consumed message (kafkajs gives an object; a repeated key, an array). */
function headerPairs (headers) {
  return Object.entries(headers ?? {}).flatMap(([k, v]) => (Array.isArray(v) ? v : [v]).map(one => [k, one]))
}

const client = {
  admin,
  async createTopic (partitions) {
    await (await admin()).createTopics({ topics: [{ topic, numPartitions: partitions }], waitForLeaders: true })
  },
  producer: kind => connected(kafka.producer({ allowAutoTopicCreation: false, ...PRODUCERS[kind] })),
  async produce (records, { acks, codec } = {}, producer) {
    const sender = producer ?? await client.producer('plain')
    const compression = codec ? { compression: CompressionTypes.GZIP } : {}
    const answer = await sender.send({ topic, messages: asMessages(records), acks, ...compression })
    return answer.map(m => ({ topic: m.topicName, partition: m.partition, offset: Number(m.baseOffset) }))
  },
  async transaction (producer, records, commit) {
    const txn = await producer.transaction()
    await txn.send({ topic, messages: asMessages(records) })
    await (commit ? txn.commit() : txn.abort())
  },
  async consume (count, { commitAt, groupId = group, readCommitted = true } = {}) {
    const consumer = await member({ groupId, readUncommitted: !readCommitted })
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    const got = []
    let done
    const finished = new Promise(resolve => { done = resolve })
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        if (got.length >= count) return
        got.push(rec({ partition, ...message, headers: headerPairs(message.headers) }))
        if (got.length === commitAt) {
          await consumer.commitOffsets([{ topic, partition, offset: String(Number(message.offset) + 1) }])
        }
        if (got.length >= count) done()
      }
    })
    let timer
    await Promise.race([finished, new Promise(resolve => { timer = setTimeout(resolve, 15000) })])
    clearTimeout(timer)
    await consumer.disconnect()
    return got
  },
  codecSupport: codec => (codec === 'gzip' ? null : `kafkajs ships only GZIP; ${codec} needs a third-party codec package`)
}

async function configValue (admins, name) {
  const { resources } = await admins.describeConfigs({
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: [name] }], includeSynonyms: false
  })
  return resources[0].configEntries.find(c => c.configName === name)?.configValue ?? null
}

async function alterTopicConfig (admins, name, value) {
  await admins.alterConfigs({ resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configEntries: [{ name, value }] }] })
}

/** A running group member whose current partitions of the topic are kept up to date. */
async function tracked () {
  const consumer = await member()
  const state = { consumer, partitions: [] }
  consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
    state.partitions = [...(payload.memberAssignment[topic] ?? [])].sort()
  })
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await consumer.run({ autoCommit: false, eachMessage: async () => {} })
  return state
}

main({
  ...sharedScenarios(client),
  async connect () {
    const admins = await admin()
    const topics = await admins.listTopics()
    const cluster = await admins.describeCluster()
    return { topics, brokers: cluster.brokers.map(b => `${b.host}:${b.port}`) }
  },
  async metadata () {
    await client.createTopic(2)
    const admins = await admin()
    const { topics } = await admins.fetchTopicMetadata({ topics: [topic] })
    const cluster = await admins.describeCluster()
    return { listed: (await admins.listTopics()).includes(topic), leaders: topics[0].partitions.map(p => p.leader), brokers: cluster.brokers.map(b => b.nodeId) }
  },
  async create_topic () {
    const admins = await admin()
    const created = await admins.createTopics({ topics: [{ topic, numPartitions: 3 }], waitForLeaders: true })
    const { topics } = await admins.fetchTopicMetadata({ topics: [topic] })
    // kafkajs answers only whether the topic was created (its metadata names it), no topic id
    return { created: { name: created ? topics[0].name : null, partitions: topics[0].partitions.length }, partitions: topics[0].partitions.length, ids: null }
  },
  async rebalance () {
    await client.createTopic(2)
    const first = await tracked()
    await until(() => first.partitions.length === 2, 'the first member to own both partitions')
    const alone = first.partitions
    const second = await tracked()
    await until(() => first.partitions.length === 1 && second.partitions.length === 1, 'one partition each')
    const shared = [first.partitions, second.partitions]
    await second.consumer.disconnect()
    await until(() => first.partitions.length === 2, 'the first member to own both partitions again')
    return { alone, shared, again: first.partitions }
  },
  async groups () {
    await client.createTopic(1)
    const one = await tracked()
    await until(() => one.partitions.length > 0, 'an assignment')
    const admins = await admin()
    const { groups: listed } = await admins.listGroups()
    const { groups: [described] } = await admins.describeGroups([group])
    return {
      listed: listed.some(g => g.groupId === group),
      state: described.state,
      protocol: described.protocol,
      members: described.members.map(m => ({
        clientId: m.clientId,
        topics: Object.keys(AssignerProtocol.MemberAssignment.decode(m.memberAssignment).assignment)
      }))
    }
  },
  async list_offsets () {
    await client.createTopic(1)
    const start = Date.now() - 3600_000
    await client.produce(numbered(3).map((r, i) => ({ ...r, timestamp: start + i * 1000 })))
    const admins = await admin()
    const [watermarks] = await admins.fetchTopicOffsets(topic)
    const [byTimestamp] = await admins.fetchTopicOffsetsByTimestamp(topic, start + 500)
    // kafkajs has no way to ask for the max timestamp's offset (ListOffsets v7's -3)
    return { earliest: Number(watermarks.low), latest: Number(watermarks.high), byTimestamp: Number(byTimestamp.offset), max: null }
  },
  async configs () {
    // kafkajs has AlterConfigs only (no IncrementalAlterConfigs)
    await client.createTopic(1)
    const admins = await admin()
    const before = await configValue(admins, 'retention.ms')
    await alterTopicConfig(admins, 'retention.ms', '3600000')
    const after = await configValue(admins, 'retention.ms')
    await alterTopicConfig(admins, 'cleanup.policy', 'compact')
    return { before, after, replaced: await configValue(admins, 'cleanup.policy'), retentionAfterReplace: await configValue(admins, 'retention.ms') }
  }
})
