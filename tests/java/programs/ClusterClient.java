// The stock Apache RocketMQ 4.9.7 Java client for the cluster tests; one line per event on stdout.
//   produce NAMESRV TOPIC COUNT DELAY_LEVEL PREFIX [TIMER_DELAY_SEC]
//                                       -> "SENT <brokerName> <queueId> <PREFIX-i> <status>" per message
//   consume NAMESRV TOPIC GROUP COUNT TIMEOUT_S [STOP_FILE]
//            -> "RECV <brokerName> <queueId> <body> <bornTs> <storeTs> <recvMs>" per message, until COUNT distinct
//               bodies or STOP_FILE exists (exit 0), or the timeout (exit 2)
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class ClusterClient {
    static synchronized void out(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        if (args[0].equals("produce")) {
            DefaultMQProducer p = new DefaultMQProducer("PID_cluster_" + System.nanoTime());
            p.setNamesrvAddr(args[1]);
            p.setSendMsgTimeout(10000);
            p.start();
            int count = Integer.parseInt(args[3]);
            int level = Integer.parseInt(args[4]);
            for (int i = 0; i < count; i++) {
                String body = args[5] + "-" + i;
                Message m = new Message(args[2], "TagA", body.getBytes("UTF-8"));
                if (level > 0) {
                    m.setDelayTimeLevel(level);
                }
                if (args.length > 6) {
                    m.putUserProperty("TIMER_DELAY_SEC", args[6]);
                }
                SendResult r = p.send(m);
                out("SENT " + r.getMessageQueue().getBrokerName() + " " + r.getMessageQueue().getQueueId() + " " + body
                    + " " + r.getSendStatus());
            }
            p.shutdown();
            out("DONE");
            return;
        }
        String namesrv = args[1], topic = args[2], group = args[3];
        int count = Integer.parseInt(args[4]);
        int timeout = Integer.parseInt(args[5]);
        Set<String> seen = ConcurrentHashMap.newKeySet();
        CountDownLatch done = new CountDownLatch(1);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(namesrv);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt m : msgs) {
                String body = new String(m.getBody());
                out("RECV " + m.getBrokerName() + " " + m.getQueueId() + " " + body + " " + m.getBornTimestamp() + " "
                    + m.getStoreTimestamp() + " " + System.currentTimeMillis());
                seen.add(body);
            }
            if (seen.size() >= count) {
                done.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        out("STARTED");
        java.io.File stop = args.length > 6 ? new java.io.File(args[6]) : null;
        long deadline = System.currentTimeMillis() + timeout * 1000L;
        boolean ok = false;
        while (System.currentTimeMillis() < deadline) {
            if (done.await(100, TimeUnit.MILLISECONDS) || (stop != null && stop.exists())) {
                ok = true;
                break;
            }
        }
        c.shutdown();
        out(ok ? "DONE" : "TIMEOUT " + seen.size());
        System.exit(ok ? 0 : 2);
    }
}
