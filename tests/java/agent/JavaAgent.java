// Drives the stock Apache RocketMQ 4.9.7 Java client (../shared/rocketmq-java/lib): the one Java client program
// of the tests (tests/interop through Agents.java()/run_java(), tests/cluster through its java_client fixture).
// The same command line and JSON-lines events as tests/interop/cpp_agent.py, so the same checks apply:
//   {"event":"started"} / {"event":"sent","i","msg_id","offset_msg_id","status","broker","queue_id",
//    "queue_offset","body","keys","tags","t_ms"} / {"event":"send_error","i","error"} / {"event":"received",
//    "msg_id","topic","tags","keys","body","broker","queue_id","queue_offset","reconsume_times","props","born_ts",
//    "store_ts","recv_ms","ack"} / {"event":"check","body","answer"} / {"event":"done",...}
// Commands: produce | consume | litepull | transaction (see parse()). consume --sql EXPR subscribes with
// MessageSelector.bySql; a start() the broker refuses emits {"event":"start_error","code","error"} (exit 3). A producer sends with --retries (0) and
// --send-timeout-ms (5000). A consumer stops at --until-count distinct acknowledged bodies or when --stop-file
// exists (exit 0), or at --timeout (exit 2); it always shuts the client down.

import com.alibaba.fastjson.JSON;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.consumer.listener.*;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;

public class JavaAgent {
    static final Object OUT = new Object();
    static final String[] INTEREST = {"UNIQ_KEY", "DELAY", "REAL_TOPIC", "REAL_QID", "RECONSUME_TIME", "CLUSTER",
            "KEYS", "TAGS", "TIMER_DELIVER_MS", "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "TIMER_OUT_MS", "TRAN_MSG"};

    static void emit(String event, Map<String, Object> fields) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("event", event);
        m.putAll(fields);
        String line = JSON.toJSONString(m);
        synchronized (OUT) {
            System.out.println(line);
            System.out.flush();
        }
    }

    static Map<String, Object> kv(Object... pairs) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < pairs.length; i += 2) m.put((String) pairs[i], pairs[i + 1]);
        return m;
    }

    static Map<String, String> opts = new HashMap<>();
    static Map<String, List<String>> multi = new HashMap<>();

    static String opt(String k, String dflt) { return opts.getOrDefault(k, dflt); }
    static int intOpt(String k, int dflt) { return Integer.parseInt(opt(k, String.valueOf(dflt))); }

    static void parse(String[] args, int from) {
        for (int i = from; i < args.length; i++) {
            String a = args[i];
            if (!a.startsWith("--")) throw new IllegalArgumentException("unexpected argument " + a);
            String key = a.substring(2);
            boolean flag = i + 1 >= args.length || args[i + 1].startsWith("--");
            String val = flag ? "true" : args[++i];
            opts.put(key, val);
            multi.computeIfAbsent(key, k -> new ArrayList<>()).add(val);
        }
    }

    static Map<String, Object> describe(MessageExt m, boolean ack) {
        Map<String, Object> props = new LinkedHashMap<>();
        for (String k : INTEREST) if (m.getProperty(k) != null) props.put(k, m.getProperty(k));
        for (String k : multi.getOrDefault("want-property", List.of()))
            if (m.getProperty(k) != null) props.put(k, m.getProperty(k));
        return kv("msg_id", m.getMsgId(), "topic", m.getTopic(), "tags", m.getTags(), "keys", m.getKeys(),
                "body", new String(m.getBody(), java.nio.charset.StandardCharsets.UTF_8),
                "broker", m.getBrokerName(), "queue_id", m.getQueueId(), "queue_offset", m.getQueueOffset(),
                "reconsume_times", m.getReconsumeTimes(), "props", props, "born_ts", m.getBornTimestamp(),
                "store_ts", m.getStoreTimestamp(), "recv_ms", System.currentTimeMillis(), "ack", ack);
    }

    static Message build(int i, String run, Map<String, Object> info) {
        String body = opt("body-prefix", "java-") + run + "-" + i;
        Message msg = new Message(opts.get("topic"), body.getBytes(java.nio.charset.StandardCharsets.UTF_8));
        String keys = opts.containsKey("key") ? opts.get("key") + "-" + i : null;
        if (keys != null) msg.setKeys(keys);
        if (opts.containsKey("tag")) msg.setTags(opts.get("tag"));
        for (String p : multi.getOrDefault("property", List.of())) {
            int eq = p.indexOf('=');
            msg.putUserProperty(p.substring(0, eq), p.substring(eq + 1));
        }
        for (String p : multi.getOrDefault("system-property", List.of())) {  // e.g. RECONSUME_TIME on a %RETRY% send
            int eq = p.indexOf('=');
            MessageAccessor.putProperty(msg, p.substring(0, eq), p.substring(eq + 1));
        }
        int level = intOpt("delay-level", 0);
        if (level > 0) msg.setDelayTimeLevel(level);
        info.putAll(kv("i", i, "body", body, "keys", keys, "tags", opts.get("tag")));
        return msg;
    }

    static Map<String, Object> sentFields(SendResult r, Map<String, Object> info, long t0) {
        Map<String, Object> m = new LinkedHashMap<>(info);
        m.putAll(kv("msg_id", r.getMsgId(), "offset_msg_id", r.getOffsetMsgId(), "status", r.getSendStatus().name(),
                "broker", r.getMessageQueue().getBrokerName(), "queue_id", r.getMessageQueue().getQueueId(),
                "queue_offset", r.getQueueOffset(), "t_ms", t0, "ack_ms", System.currentTimeMillis()));
        return m;
    }

    static int produce() throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(opt("group", "GID_java_produce"));
        p.setNamesrvAddr(opts.get("namesrv"));
        p.setSendMsgTimeout(intOpt("send-timeout-ms", 5000));
        p.setRetryTimesWhenSendFailed(intOpt("retries", 0));
        p.start();
        emit("started", kv());
        String run = opt("run-id", UUID.randomUUID().toString().substring(0, 8));
        String mode = opt("mode", "sync");
        int count = intOpt("count", 10);
        int errors = 0;
        if (mode.equals("batch")) {
            int size = intOpt("batch-size", 10);
            for (int start = 0; start < count; start += size) {
                List<Message> msgs = new ArrayList<>();
                List<Map<String, Object>> infos = new ArrayList<>();
                for (int i = start; i < Math.min(count, start + size); i++) {
                    Map<String, Object> info = new LinkedHashMap<>();
                    msgs.add(build(i, run, info));
                    infos.add(info);
                }
                long t0 = System.currentTimeMillis();
                try {
                    SendResult r = p.send(msgs);
                    String[] ids = r.getMsgId().split(",");
                    String[] offIds = r.getOffsetMsgId().split(",");
                    for (int j = 0; j < infos.size(); j++) {
                        Map<String, Object> f = sentFields(r, infos.get(j), t0);
                        f.put("msg_id", ids.length == infos.size() ? ids[j] : r.getMsgId());
                        f.put("offset_msg_id", offIds.length == infos.size() ? offIds[j] : r.getOffsetMsgId());
                        emit("sent", f);
                    }
                } catch (Exception e) {
                    errors += infos.size();
                    for (Map<String, Object> info : infos) emit("send_error", kv("i", info.get("i"), "error", e.toString()));
                }
            }
        } else if (mode.equals("async")) {
            CountDownLatch latch = new CountDownLatch(count);
            AtomicInteger failed = new AtomicInteger();
            for (int i = 0; i < count; i++) {
                Map<String, Object> info = new LinkedHashMap<>();
                Message msg = build(i, run, info);
                long t0 = System.currentTimeMillis();
                p.send(msg, new SendCallback() {
                    public void onSuccess(SendResult r) { emit("sent", sentFields(r, info, t0)); latch.countDown(); }
                    public void onException(Throwable e) {
                        failed.incrementAndGet();
                        emit("send_error", kv("i", info.get("i"), "error", e.toString()));
                        latch.countDown();
                    }
                });
            }
            if (!latch.await(intOpt("timeout", 60), TimeUnit.SECONDS)) {
                emit("done", kv("error", "async callbacks missing at timeout"));
                Runtime.getRuntime().halt(3);
            }
            errors = failed.get();
        } else {
            int shards = intOpt("shards", 4);
            for (int i = 0; i < count; i++) {
                Map<String, Object> info = new LinkedHashMap<>();
                Message msg = build(i, run, info);
                long t0 = System.currentTimeMillis();
                try {
                    switch (mode) {
                        case "sync" -> emit("sent", sentFields(p.send(msg), info, t0));
                        case "orderly" -> {
                            int shard = i % shards;
                            info.put("shard", shard);
                            emit("sent", sentFields(p.send(msg, (mqs, m, arg) -> mqs.get((Integer) arg % mqs.size()), shard), info, t0));
                        }
                        case "oneway" -> {
                            p.sendOneway(msg);
                            Map<String, Object> f = new LinkedHashMap<>(info);
                            f.put("t_ms", t0);
                            emit("sent", f);
                        }
                        default -> throw new IllegalArgumentException("unknown mode " + mode);
                    }
                } catch (IllegalArgumentException e) {
                    throw e;
                } catch (Exception e) {
                    errors++;
                    emit("send_error", kv("i", i, "error", e.toString(), "t_ms", System.currentTimeMillis()));
                }
                int pause = intOpt("pause-ms", 0);  // pacing a bounded stream through a failover
                if (pause > 0) Thread.sleep(pause);
            }
        }
        p.shutdown();
        emit("done", kv("run", run, "errors", errors));
        return 0;
    }

    static final class Tracker {
        final int until, laterTimes;
        final Map<String, Integer> deliveries = new HashMap<>();
        final Set<String> acked = new HashSet<>();
        final CountDownLatch finished = new CountDownLatch(1);
        Tracker(int until, int laterTimes) { this.until = until; this.laterTimes = laterTimes; }
        synchronized boolean decide(String body) {
            int n = deliveries.merge(body, 1, Integer::sum);
            if (n <= laterTimes) return false;
            acked.add(body);
            if (until > 0 && acked.size() >= until) finished.countDown();
            return true;
        }
        synchronized int ackedCount() { return acked.size(); }
    }

    static int consume() throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(opt("group", "GID_java_consume"));
        c.setNamesrvAddr(opts.get("namesrv"));
        c.setInstanceName(opt("instance", "agent-" + ProcessHandle.current().pid()));
        c.setMessageModel(opt("model", "clustering").equals("broadcasting") ? MessageModel.BROADCASTING : MessageModel.CLUSTERING);
        c.setConsumeFromWhere(opt("from", "first").equals("last") ? ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET : ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setConsumeMessageBatchMaxSize(1);
        c.setMaxReconsumeTimes(intOpt("max-reconsume-times", 16));
        if (opts.containsKey("sql")) c.subscribe(opts.get("topic"), MessageSelector.bySql(opts.get("sql")));
        else c.subscribe(opts.get("topic"), opt("expr", "*"));
        Tracker t = new Tracker(intOpt("until-count", 0), intOpt("reconsume-later-times", 0));
        boolean failForever = opts.containsKey("fail-forever");
        if (opts.containsKey("orderly")) {
            c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    boolean ack = t.decide(new String(m.getBody(), java.nio.charset.StandardCharsets.UTF_8));
                    emit("received", describe(m, ack));
                    if (!ack) return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT;
                }
                return ConsumeOrderlyStatus.SUCCESS;
            });
        } else {
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    boolean ack = !failForever && t.decide(new String(m.getBody(), java.nio.charset.StandardCharsets.UTF_8));
                    emit("received", describe(m, ack));
                    if (!ack) return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        }
        try {
            c.start();
        } catch (MQClientException e) {  // e.g. the broker refused a --sql subscription (checkClientInBroker)
            emit("start_error", kv("code", e.getResponseCode(), "error", String.valueOf(e.getMessage())));
            c.shutdown();
            return 3;
        }
        emit("started", kv("pid", ProcessHandle.current().pid()));
        java.io.File stop = opts.containsKey("stop-file") ? new java.io.File(opts.get("stop-file")) : null;
        long deadline = System.currentTimeMillis() + intOpt("timeout", 60) * 1000L;
        String reason = "timeout";
        while (System.currentTimeMillis() < deadline) {
            if (t.finished.await(Math.min(100, Math.max(1, deadline - System.currentTimeMillis())), TimeUnit.MILLISECONDS)) {
                reason = "count";
                break;
            }
            if (stop != null && stop.exists()) {
                reason = "stop-file";
                break;
            }
        }
        emit("stopping", kv("reason", reason, "acked", t.ackedCount()));
        c.shutdown();
        emit("done", kv("reason", reason, "acked", t.ackedCount()));
        return !reason.equals("timeout") || failForever ? 0 : 2;
    }

    static int litepull() throws Exception {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(opt("group", "GID_java_litepull"));
        c.setNamesrvAddr(opts.get("namesrv"));
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(opts.get("topic"), opt("expr", "*"));
        c.start();
        emit("started", kv());
        int until = intOpt("until-count", 1);
        Set<String> seen = new HashSet<>();
        long deadline = System.currentTimeMillis() + intOpt("timeout", 60) * 1000L;
        while (seen.size() < until && System.currentTimeMillis() < deadline) {
            for (MessageExt m : c.poll(1000)) {
                seen.add(new String(m.getBody(), java.nio.charset.StandardCharsets.UTF_8));
                emit("received", describe(m, true));
            }
        }
        c.commitSync();
        String reason = seen.size() >= until ? "count" : "timeout";
        c.shutdown();
        emit("done", kv("reason", reason, "acked", seen.size()));
        return reason.equals("count") ? 0 : 2;
    }

    // Half messages: the local transaction answers --local (commit|rollback|unknown); the broker's
    // check-back is answered with --check (commit|rollback). With --until-checks N the producer stays up
    // until N check-backs were answered (at most --timeout seconds): the broker calls a live producer.
    static int transaction() throws Exception {
        TransactionMQProducer p = new TransactionMQProducer(opt("group", "GID_java_tx"));
        p.setNamesrvAddr(opts.get("namesrv"));
        LocalTransactionState local = state(opt("local", "commit"));
        LocalTransactionState check = state(opt("check", "commit"));
        CountDownLatch checks = new CountDownLatch(intOpt("until-checks", 0));
        p.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) { return local; }
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                emit("check", kv("body", new String(msg.getBody(), java.nio.charset.StandardCharsets.UTF_8),
                        "answer", check.name(), "msg_id", msg.getMsgId()));
                checks.countDown();
                return check;
            }
        });
        p.start();
        emit("started", kv());
        String run = opt("run-id", UUID.randomUUID().toString().substring(0, 8));
        int errors = 0;
        for (int i = 0; i < intOpt("count", 1); i++) {
            Map<String, Object> info = new LinkedHashMap<>();
            Message msg = build(i, run, info);
            long t0 = System.currentTimeMillis();
            try {
                TransactionSendResult r = p.sendMessageInTransaction(msg, null);
                Map<String, Object> f = sentFields(r, info, t0);
                f.put("local_state", String.valueOf(r.getLocalTransactionState()));
                emit("sent", f);
            } catch (Exception e) {
                errors++;
                emit("send_error", kv("i", i, "error", e.toString()));
            }
        }
        boolean checked = checks.await(intOpt("timeout", 60), TimeUnit.SECONDS);
        p.shutdown();
        emit("done", kv("run", run, "errors", errors, "reason", checked ? "count" : "timeout"));
        return checked ? 0 : 2;
    }

    static LocalTransactionState state(String s) {
        return switch (s) {
            case "commit" -> LocalTransactionState.COMMIT_MESSAGE;
            case "rollback" -> LocalTransactionState.ROLLBACK_MESSAGE;
            default -> LocalTransactionState.UNKNOW;
        };
    }

    public static void main(String[] args) throws Exception {
        // client logs and broadcasting offsets go under user.home: the per-agent HOME the harness gives
        if (System.getenv("HOME") != null) System.setProperty("user.home", System.getenv("HOME"));
        parse(args, 1);
        int code = switch (args[0]) {
            case "produce" -> produce();
            case "consume" -> consume();
            case "litepull" -> litepull();
            case "transaction" -> transaction();
            default -> throw new IllegalArgumentException("unknown command " + args[0]);
        };
        System.out.flush();
        Runtime.getRuntime().halt(code);
    }
}
