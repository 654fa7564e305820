'use strict';
// ali-ons (the Node RocketMQ client) against a delaymq broker given as its name server.
// Sends --count messages, then consumes the topic with a fresh group until every sent body was
// delivered (exit 0) or --timeout seconds pass (exit 2). One JSON object per stdout line:
//   {"event":"sent",...} {"event":"send_error",...} {"event":"received",...} {"event":"done",...}
// ali-ons cannot create topics: the caller creates the topic first.
// No Aliyun: `nameSrv` bypasses the HTTP name-server lookup (httpclient is asserted but unused then),
// and without accessKey/secretKey no request is signed.

const { Producer, Consumer, Message } = require('ali-ons');
const ConsumeFromWhere = require('ali-ons/lib/consumer/consume_from_where');

function parseArgs(argv) {
  const out = { count: 10, timeout: 60, tag: 'TagN', group: 'GID_node', topic: null, namesrv: null, runId: null };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '').replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    out[key] = argv[i + 1];
  }
  out.count = Number(out.count);
  out.timeout = Number(out.timeout);
  if (!out.topic || !out.namesrv) throw new Error('--topic and --namesrv are required');
  return out;
}

function short(err) {
  return String(err && err.message || err).slice(0, 300);
}

function emit(event, fields) {
  process.stdout.write(JSON.stringify(Object.assign({ event }, fields)) + '\n');
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const run = a.runId || Math.random().toString(16).slice(2, 10);
  const common = { httpclient: {}, nameSrv: [ a.namesrv ], instanceName: `node-${process.pid}` };
  const timer = setTimeout(() => {
    emit('done', { reason: 'timeout' });
    process.exit(2);
  }, a.timeout * 1000);

  const producer = new Producer(Object.assign({ producerGroup: `${a.group}_P` }, common));
  await producer.ready();
  emit('started', { role: 'producer' });
  const want = new Set();
  for (let i = 0; i < a.count; i++) {
    const body = `node-${run}-${i}`;
    const msg = new Message(a.topic, a.tag, body);
    msg.keys = [ `nk-${i}` ];
    try {
      const r = await producer.send(msg);
      want.add(body);
      emit('sent', { i, body, keys: `nk-${i}`, tags: a.tag, msg_id: r.msgId, status: r.sendStatus,
        queue_id: r.messageQueue && r.messageQueue.queueId, offset: r.queueOffset });
    } catch (err) {
      emit('send_error', { i, error: short(err) });
    }
  }

  const consumer = new Consumer(Object.assign({
    consumerGroup: a.group,
    consumeFromWhere: ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
  }, common));
  consumer.on('error', err => emit('client_error', { error: short(err) }));
  const seen = new Set();
  let finishing = false;
  consumer.subscribe(a.topic, '*', async msg => {
    const body = msg.body.toString();
    seen.add(body);
    emit('received', { ack: true, body, msg_id: msg.msgId, topic: msg.topic, tags: msg.tags || null,
      keys: msg.keys || null, queue_id: msg.queueId, queue_offset: Number(msg.queueOffset),
      reconsume_times: msg.reconsumeTimes, born_ts: Number(msg.bornTimestamp),
      store_ts: Number(msg.storeTimestamp), recv_ms: Date.now(), props: msg.properties });
    if (!finishing && want.size > 0 && [ ...want ].every(b => seen.has(b))) {
      finishing = true;
      setImmediate(async () => {
        clearTimeout(timer);
        await consumer.close();
        await producer.close();
        emit('done', { reason: 'count', acked: seen.size });
        process.exit(0);
      });
    }
  });
  await consumer.ready();
  emit('started', { role: 'consumer' });
}

main().catch(err => {
  emit('fatal', { error: String(err && err.stack || err) });
  process.exit(1);
});
