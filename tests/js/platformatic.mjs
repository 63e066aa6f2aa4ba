// The scenarios of tests/test_js_clients.py with @platformatic/kafka (pure JavaScript, Kafka
// 3.5-4.x protocol: ApiVersions v3 first, then the highest version of each API both sides
// know). Every request's (API key, version) is taken from the client's diagnostics channel.
import { tracingChannel } from 'node:diagnostics_channel'
import zlib from 'node:zlib'
import {
  Admin, ConfigResourceTypes, Consumer, FetchIsolationLevels, IncrementalAlterConfigOperationTypes,
  ListOffsetTimestamps, Producer, stringDeserializers, stringSerializers
} from '@platformatic/kafka'
import { CLIENT_ID, bootstrap, group, main, numbered, rec, recordRequest, sharedScenarios, topic, until } from './common.mjs'

// @platformatic/kafka asks for Node >= 22; on Node 20 it runs once Promise.withResolvers
// (ES2024, Node 22) exists. zstd stays Node 22's (codecSupport below).
Promise.withResolvers ??= function () {
  let resolve, reject
  const promise = new Promise((yes, no) => { resolve = yes; reject = no })
  return { promise, resolve, reject }
}

tracingChannel('plt:kafka:connections:api').subscribe({
  start: ({ apiKey, apiVersion }) => recordRequest(apiKey, apiVersion),
  end () {}, asyncStart () {}, asyncEnd () {}, error () {}
})

const base = { clientId: CLIENT_ID, bootstrapBrokers: [bootstrap], retries: 2, retryDelay: 200, timeout: 10000 }
const PRODUCERS = {
  plain: {},
  idempotent: { idempotent: true },
  transactional: { idempotent: true, transactionalId: `${topic}-txn` }
}

const newAdmin = () => new Admin(base)

function member (groupId = group) {
  return new Consumer({
    ...base,
    groupId,
    deserializers: stringDeserializers,
    sessionTimeout: 6000,
    rebalanceTimeout: 6000,
    heartbeatInterval: 500,
    maxWaitTime: 200,
    autocommit: false
  })
}

const asMessages = records => records.map(r => ({
  topic,
  key: r.key ?? undefined,
  value: r.value,
  headers: new Map(r.headers),
  ...(r.timestamp === undefined ? {} : { timestamp: BigInt(r.timestamp) })
}))

const client = {
  admin: async () => newAdmin(),
  async createTopic (partitions) {
    await newAdmin().createTopics({ topics: [topic], partitions, replicas: 1 })
  },
  producer: async kind => new Producer({ ...base, serializers: stringSerializers, ...PRODUCERS[kind] }),
  async produce (records, { acks, codec } = {}, producer) {
    const sender = producer ?? await client.producer('plain')
    const result = await sender.send({ messages: asMessages(records), acks, ...(codec ? { compression: codec } : {}) })
    return result.offsets
  },
  async transaction (producer, records, commit) {
    const txn = await producer.beginTransaction()
    await txn.send({ messages: asMessages(records) })
    await (commit ? txn.commit() : txn.abort())
  },
  async consume (count, { commitAt, groupId, readCommitted = true } = {}) {
    const consumer = member(groupId)
    const isolationLevel = readCommitted ? FetchIsolationLevels.READ_COMMITTED : FetchIsolationLevels.READ_UNCOMMITTED
    const stream = await consumer.consume({ topics: [topic], mode: 'committed', fallbackMode: 'earliest', isolationLevel })
    const got = []
    for await (const message of stream) {
      got.push(rec({ ...message, headers: message.headerEntries }))
      if (got.length === commitAt) await message.commit()
      if (got.length >= count) break
    }
    await stream.close()
    await consumer.close()
    return got
  },
  codecSupport: codec => (codec === 'zstd' && !zlib.zstdCompressSync
    ? `zstd needs node:zlib's zstd (Node >= 22.15), this is Node ${process.versions.node}`
    : null)
}

async function listOffset (timestamp) {
  const [answer] = await newAdmin().listOffsets({ topics: [{ name: topic, partitions: [{ partitionIndex: 0, timestamp }] }] })
  return Number(answer.partitions[0].offset)
}

async function configValue (admin, name) {
  const [description] = await admin.describeConfigs({
    resources: [{ resourceType: ConfigResourceTypes.TOPIC, resourceName: topic, configurationKeys: [name] }]
  })
  return description.configs.find(c => c.name === name)?.value ?? null
}

/** A member's partitions of the topic, as its latest assignment gives them. */
const owned = consumer => (consumer.assignments ?? []).flatMap(a => a.partitions).sort()

main({
  ...sharedScenarios(client),
  async connect () {
    const admin = newAdmin()
    const topics = await admin.listTopics()
    const metadata = await admin.metadata({ topics: [] })
    return { topics, brokers: [...metadata.brokers.values()].map(b => `${b.host}:${b.port}`) }
  },
  async metadata () {
    await client.createTopic(2)
    const admin = newAdmin()
    const metadata = await admin.metadata({ topics: [topic] })
    const partitions = metadata.topics.get(topic).partitions
    return { listed: (await admin.listTopics()).includes(topic), leaders: partitions.map(p => p.leader), brokers: [...metadata.brokers.keys()] }
  },
  async create_topic () {
    const [created] = await newAdmin().createTopics({ topics: [topic], partitions: 3, replicas: 1 })
    const metadata = await newAdmin().metadata({ topics: [topic] })
    const described = metadata.topics.get(topic)
    return { created: { name: created.name, partitions: created.partitions }, partitions: described.partitionsCount, ids: [created.id, described.id] }
  },
  async rebalance () {
    await client.createTopic(2)
    const first = member()
    const firstStream = await first.consume({ topics: [topic], mode: 'earliest' })
    await until(() => owned(first).length === 2, 'the first member to own both partitions')
    const alone = owned(first)
    const second = member()
    const secondStream = await second.consume({ topics: [topic], mode: 'earliest' })
    await until(() => owned(first).length === 1 && owned(second).length === 1, 'one partition each')
    const shared = [owned(first), owned(second)]
    await secondStream.close()
    await second.close()
    await until(() => owned(first).length === 2, 'the first member to own both partitions again')
    const again = owned(first)
    await firstStream.close()
    return { alone, shared, again }
  },
  async groups () {
    await client.createTopic(1)
    const consumer = member()
    const stream = await consumer.consume({ topics: [topic], mode: 'earliest' })
    await until(() => owned(consumer).length > 0, 'an assignment')
    const admin = newAdmin()
    const listed = await admin.listGroups()
    const described = (await admin.describeGroups({ groups: [group] })).get(group)
    await stream.close()
    return {
      listed: listed.has(group),
      state: described.state,
      protocol: described.protocol,
      members: [...described.members.values()].map(m => ({ clientId: m.clientId, topics: [...(m.assignments?.keys() ?? [])] }))
    }
  },
  async list_offsets () {
    await client.createTopic(1)
    const start = Date.now() - 3600_000
    await client.produce(numbered(3).map((r, i) => ({ ...r, timestamp: start + i * 1000 })))
    return {
      earliest: await listOffset(ListOffsetTimestamps.EARLIEST),
      latest: await listOffset(ListOffsetTimestamps.LATEST),
      byTimestamp: await listOffset(BigInt(start + 500)),
      max: await listOffset(ListOffsetTimestamps.MAX)
    }
  },
  async configs () {
    await client.createTopic(1)
    const admin = newAdmin()
    const before = await configValue(admin, 'retention.ms')
    await admin.incrementalAlterConfigs({
      resources: [{
        resourceType: ConfigResourceTypes.TOPIC,
        resourceName: topic,
        configs: [{ name: 'retention.ms', configOperation: IncrementalAlterConfigOperationTypes.SET, value: '3600000' }]
      }]
    })
    const after = await configValue(admin, 'retention.ms')
    await admin.alterConfigs({
      resources: [{ resourceType: ConfigResourceTypes.TOPIC, resourceName: topic, configs: [{ name: 'cleanup.policy', value: 'compact' }] }]
    })
    return { before, after, replaced: await configValue(admin, 'cleanup.policy'), retentionAfterReplace: await configValue(admin, 'retention.ms') }
  }
})
