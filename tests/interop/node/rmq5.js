'use strict';
// Apache's RocketMQ 5 Node client (npm rocketmq-client-nodejs, gRPC) against a delaymq broker's gRPC port.
// One JSON object per stdout line with an "event" key, like rmq5_agent.py:
//
//   produce --endpoint H:P --topic T --count N [--tag X] [--body-prefix P] [--delay MS] [--recall I,J]
//           -> {"event":"sent","i","id","recall","t_send","deliver_ms"} ... then for each index in --recall
//              {"event":"recalled","i","id"} (or "recall_error"), {"event":"done"}
//   simple  --endpoint H:P --group G --topic T --until-count N [--tag X] [--invisible MS] [--no-ack]
//           [--max-seconds S] [--await-ms MS: the long polling time, 2000; Apache's proxy needs >= 5000]
//           -> {"event":"received","id","body","attempt","t","deliver_ms","corrupted"}
//              {"event":"acked","id"} ... {"event":"done"}
//   watch   --endpoint H:P --group G --topic T --seconds S: a SimpleConsumer that only keeps its
//           telemetry session open (the broker may send it verify-message / thread-stack commands)
//           -> {"event":"started"} ... {"event":"done"}
//
// Times are this process's clock (Date.now()). Exit 0 when the goal was reached, 3 on timeout,
// 1 on an error. The client logs to $HOME/logs/rocketmq/ (the test gives each agent its own HOME).

const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

function parseArgs(argv) {
  const out = { cmd: argv[0], count: 1, tag: '*', bodyPrefix: 'm', untilCount: 1, maxSeconds: 30,
    invisible: 15000, noAck: false, delay: 0, recall: '', seconds: 10, awaitMs: 2000 };
  for (let i = 1; i < argv.length; i++) {
    const key = argv[i].replace(/^--/, '').replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    if (key === 'noAck') { out.noAck = true; continue; }
    out[key] = argv[++i];
  }
  for (const k of [ 'count', 'untilCount', 'maxSeconds', 'invisible', 'delay', 'seconds', 'awaitMs' ]) out[k] = Number(out[k]);
  if (!out.endpoint || !out.topic) throw new Error('--endpoint and --topic are required');
  return out;
}

function emit(event, fields) {
  process.stdout.write(JSON.stringify(Object.assign({ event }, fields)) + '\n');
}

function short(err) {
  return String(err && err.message || err).slice(0, 300);
}

async function produce(a) {
  const p = new Producer({ endpoints: a.endpoint, topics: [ a.topic ] });
  await p.startup();
  emit('started', { role: 'producer' });
  const sent = [];
  try {
    for (let i = 0; i < a.count; i++) {
      const msg = { topic: a.topic, tag: a.tag === '*' ? undefined : a.tag, body: Buffer.from(`${a.bodyPrefix}${i}`) };
      const tSend = Date.now();
      if (a.delay > 0) msg.delay = a.delay; // the client sets delivery_timestamp = Date.now() + delay
      const r = await p.send(msg);
      sent.push(r);
      emit('sent', { i, id: r.messageId, recall: r.recallHandle || null, t_send: tSend,
        deliver_ms: a.delay > 0 ? tSend + a.delay : null, offset: r.offset });
    }
    for (const s of String(a.recall).split(',').filter(x => x !== '')) {
      const i = Number(s);
      try {
        const rr = await p.recallMessage(a.topic, sent[i].recallHandle);
        emit('recalled', { i, id: rr.messageId });
      } catch (err) {
        emit('recall_error', { i, error: short(err) });
      }
    }
  } finally {
    await p.shutdown();
  }
  emit('done', {});
  return 0;
}

async function simple(a) {
  const c = new SimpleConsumer({ endpoints: a.endpoint, consumerGroup: a.group,
    subscriptions: new Map().set(a.topic, a.tag), awaitDuration: a.awaitMs });
  await c.startup();
  emit('started', { role: 'simple' });
  const deadline = Date.now() + a.maxSeconds * 1000;
  let n = 0;
  try {
    while (n < a.untilCount && Date.now() < deadline) {
      const tReq = Date.now();
      const msgs = await c.receive(16, a.invisible);
      for (const m of msgs) {
        n++;
        emit('received', { id: m.messageId, body: m.body.toString(), tag: m.tag || null, attempt: m.deliveryAttempt,
          t: Date.now(), t_req: tReq, corrupted: m.corrupted === true,
          deliver_ms: m.deliveryTimestamp ? m.deliveryTimestamp.getTime() : null });
        if (!a.noAck) {
          await c.ack(m);
          emit('acked', { id: m.messageId });
        }
      }
    }
  } finally {
    await c.shutdown();
  }
  emit('done', { received: n });
  return n >= a.untilCount ? 0 : 3;
}

async function watch(a) {
  const c = new SimpleConsumer({ endpoints: a.endpoint, consumerGroup: a.group,
    subscriptions: new Map().set(a.topic, a.tag), awaitDuration: 2000 });
  await c.startup();
  emit('started', { role: 'watch', client_id: c.clientId });
  await new Promise(resolve => setTimeout(resolve, a.seconds * 1000));
  await c.shutdown();
  emit('done', {});
  return 0;
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const run = { produce, simple, watch }[a.cmd];
  if (!run) throw new Error(`unknown command ${a.cmd}`);
  return run(a);
}

main().then(code => process.exit(code), err => {
  emit('error', { error: short(err), stack: String(err && err.stack || '').slice(0, 2000) });
  process.exit(1);
});
