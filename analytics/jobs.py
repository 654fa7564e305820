"""Spark aggregations over the broker's exports.

Files are read with `binaryFiles` and decoded on the executors (analytics.readers), so the same
job runs in local mode and on a cluster (`--master spark://...`); nothing is collected to the
driver except the small aggregated tables the report draws.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.group import GroupedData
from pyspark.sql.window import Window

from analytics import readers

TRACE_SCHEMA = T.StructType(
    [
        T.StructField("event", T.StringType()),
        T.StructField("kind", T.StringType()),
        T.StructField("level", T.IntegerType()),
        T.StructField("topic", T.StringType()),
        T.StructField("msgId", T.StringType()),
        T.StructField("uniqKey", T.StringType()),
        T.StructField("bornTs", T.LongType()),
        T.StructField("storeTs", T.LongType()),
        T.StructField("dueTs", T.LongType()),
        T.StructField("deliveredTs", T.LongType()),
    ]
)
METRIC_SCHEMA = T.StructType(
    [
        T.StructField("ts", T.LongType()),
        T.StructField("name", T.StringType()),
        T.StructField("type", T.StringType()),
        T.StructField("topic", T.StringType()),
        T.StructField("level", T.StringType()),
        T.StructField("group", T.StringType()),
        T.StructField("value", T.DoubleType()),
        T.StructField("sum", T.DoubleType()),
        T.StructField("count", T.LongType()),
    ]
)
RMQ_TRACE_SCHEMA = T.StructType(
    [
        T.StructField("traceType", T.StringType()),
        T.StructField("timestamp", T.LongType()),
        T.StructField("group", T.StringType()),
        T.StructField("topic", T.StringType()),
        T.StructField("msgId", T.StringType()),
        T.StructField("keys", T.StringType()),
        T.StructField("costTime", T.LongType()),
        T.StructField("success", T.BooleanType()),
        T.StructField("storeTs", T.LongType()),
    ]
)


def spark_session(master: str = "local[*]", app: str = "delaymq-analytics") -> SparkSession:
    # Executors decode msgpack with analytics.readers: in local mode they must run this interpreter
    # (the project's venv), not whatever `python3` is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _has_files(path: str) -> bool:
    if "://" in path and not path.startswith("file://"):
        return True  # remote filesystem: let Spark resolve the glob
    local = path.removeprefix("file://")
    return os.path.isdir(local) and any(n.endswith(".msgpack") for n in os.listdir(local))


# a reader of analytics.readers: one exported file's bytes -> its rows (tuples matching the schema)
Decoder = Callable[[bytes], Iterable[tuple[Any, ...]]]


def _load(spark: SparkSession, path: str, decoder: Decoder, schema: T.StructType) -> DataFrame:
    if not _has_files(path):
        return spark.createDataFrame([], schema)
    rdd = spark.sparkContext.binaryFiles(os.path.join(path, "*.msgpack")).flatMap(lambda kv: decoder(kv[1]))
    # every table reads the same inputs: decode the files once (cache spills to disk when memory is short)
    return spark.createDataFrame(rdd, schema).cache()


@dataclass
class Inputs:
    traces: DataFrame
    metrics: DataFrame
    rmq_trace: DataFrame


def load_inputs(spark: SparkSession, export_dir: str) -> Inputs:
    return Inputs(
        traces=_load(spark, os.path.join(export_dir, "traces"), readers.trace_rows, TRACE_SCHEMA),
        metrics=_load(spark, os.path.join(export_dir, "metrics"), readers.metric_rows, METRIC_SCHEMA),
        rmq_trace=_load(spark, os.path.join(export_dir, "rmq_trace"), readers.rmq_trace_rows, RMQ_TRACE_SCHEMA),
    )


def _bucket(col: str, bucket_ms: int) -> Column:
    return (F.floor(F.col(col) / bucket_ms) * bucket_ms).cast("long")


def _series() -> Column:
    return F.when(F.col("kind") == "timer", F.lit("timer")).otherwise(F.concat(F.lit("level-"), F.col("level")))


def _delivered(traces: DataFrame) -> DataFrame:
    """Delivered scheduled messages with their series ("level-N" / "timer") and lateness in ms
    (delivered store time minus due time: negative means delivered early)."""
    return traces.where(F.col("event") == "delivered").withColumn("series", _series()).withColumn(
        "latenessMs", F.col("deliveredTs") - F.col("dueTs"))


def lateness(traces: DataFrame, bucket_ms: int) -> tuple[DataFrame, DataFrame]:
    """Lateness (delivered store time minus due time) per delay level / timer: overall and per time bucket.
    `early` counts the messages delivered before their due time (the broker's promise is that it is 0)."""
    delivered = _delivered(traces)
    pct = F.percentile_approx("latenessMs", [0.5, 0.9, 0.99], 10000)

    def agg(grouped: GroupedData) -> DataFrame:
        return grouped.agg(
            F.count("*").alias("count"),
            pct.getItem(0).alias("p50"),
            pct.getItem(1).alias("p90"),
            pct.getItem(2).alias("p99"),
            F.max("latenessMs").alias("max"),
            F.min("latenessMs").alias("min"),
            F.sum(F.when(F.col("latenessMs") < 0, 1).otherwise(0)).alias("early"),
        )

    overall = agg(delivered.groupBy("series")).orderBy("series")
    over_time = agg(delivered.withColumn("bucket", _bucket("deliveredTs", bucket_ms)).groupBy("series", "bucket"))
    return overall, over_time.orderBy("series", "bucket")


def peak_due(traces: DataFrame) -> DataFrame:
    """Per delay level / timer: the most delivered messages that fell due in one wall-clock second
    (`peakDuePerSec`), and that second (`peakDueTs`, ms)."""
    per_second = (_delivered(traces).withColumn("dueSecond", _bucket("dueTs", 1000))
                  .groupBy("series", "dueSecond").agg(F.count("*").alias("due")))
    return (per_second.groupBy("series")
            .agg(F.max("due").alias("peakDuePerSec"), F.max_by("dueSecond", "due").alias("peakDueTs"))
            .orderBy("series"))


SYSTEM_TOPICS = ("SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC")


def _counter_deltas(metrics: DataFrame, name: str, key: str) -> DataFrame:
    """(key, ts, delta) of a counter as Prometheus' `rate` counts it: the increase since the previous
    sample; after a reset (a smaller value: the broker restarted) the whole new value; the first sample
    of a series counts whole too (its counter started at 0 when that run of the broker began, or when
    the series first appeared in it)."""
    w = Window.partitionBy(key).orderBy("ts")
    prev = F.lag("value").over(w)
    return (
        metrics.where(F.col("name") == name)
        .withColumn("prevValue", prev)
        .withColumn("delta", F.when(F.col("prevValue").isNull() | (F.col("value") < F.col("prevValue")), F.col("value"))
                    .otherwise(F.col("value") - F.col("prevValue")))
        .select(key, "ts", "delta")
    )


def throughput(inputs: Inputs, bucket_ms: int) -> DataFrame:
    """Messages arriving in each real topic per time bucket, from the put counters: the broker counts a
    scheduled message when it is delivered into its real topic, so the scheduler's and transactions'
    system topics (where it waited) are left out and each message counts once, where it arrived."""
    return (_counter_deltas(inputs.metrics, "delaymq_put_messages_total", "topic")
            .where(~F.col("topic").isin(*SYSTEM_TOPICS))
            .withColumn("bucket", _bucket("ts", bucket_ms)).groupBy("topic", "bucket")
            .agg(F.sum("delta").alias("messages"))
            .withColumn("ratePerSec", F.col("messages") / (bucket_ms / 1000.0)).orderBy("topic", "bucket"))


CDF_QUANTILES = tuple([i / 100 for i in range(100)] + [0.999])  # the CDF stops at p99.9: the max is in the summary


def lateness_cdf(traces: DataFrame) -> DataFrame:
    """Per delay level / timer: the lateness at percentiles 0, 1, .., 99 and 99.9 (the distribution's CDF,
    cut at p99.9 so one outlier does not stretch the axis)."""
    agg = _delivered(traces).groupBy("series").agg(
        F.percentile_approx("latenessMs", list(CDF_QUANTILES), 10000).alias("values"))
    exploded = agg.select("series", F.posexplode("values").alias("pos", "latenessMs"))
    pct = F.when(F.col("pos") == len(CDF_QUANTILES) - 1, F.lit(CDF_QUANTILES[-1] * 100)).otherwise(
        F.col("pos").cast("double"))
    return exploded.select("series", pct.alias("pct"), "latenessMs").orderBy("series", "pct")


def delay_table(inputs: Inputs) -> dict[int, int]:
    """Level -> delay in ms, as the broker exported it last (delaymq_schedule_delay_seconds)."""
    rows = (inputs.metrics.where(F.col("name") == "delaymq_schedule_delay_seconds")
            .groupBy("level").agg(F.max_by("value", "ts").alias("delay")).collect())
    out: dict[int, int] = {}
    for r in rows:
        try:
            out[int(r["level"])] = int(round(float(r["delay"]) * 1000))
        except (TypeError, ValueError):
            continue
    return out


def deliveries(traces: DataFrame, bucket_ms: int) -> DataFrame:
    """Scheduled messages delivered per delay level / timer and time bucket (from the traces), as a
    count and as msg/s."""
    return (
        _delivered(traces)
        .withColumn("bucket", _bucket("deliveredTs", bucket_ms))
        .groupBy("series", "bucket")
        .agg(F.count("*").alias("delivered"))
        .withColumn("ratePerSec", F.col("delivered") / (bucket_ms / 1000.0))
        .orderBy("series", "bucket")
    )


def _gauge(metrics: DataFrame, name: str, keys: list[str], bucket_ms: int) -> DataFrame:
    return (
        metrics.where(F.col("name") == name)
        .withColumn("bucket", _bucket("ts", bucket_ms))
        .groupBy(*keys, "bucket")
        .agg(F.max("value").alias("max"), F.avg("value").alias("avg"))
        .orderBy(*keys, "bucket")
    )


def backlog(inputs: Inputs, bucket_ms: int) -> DataFrame:
    """Pending scheduled messages over time: per delay level and the timer wheel."""
    levels = _gauge(inputs.metrics, "delaymq_schedule_pending", ["level"], bucket_ms).withColumn(
        "series", F.concat(F.lit("level-"), F.col("level"))
    )
    timer = _gauge(inputs.metrics, "delaymq_timer_pending", [], bucket_ms).withColumn("series", F.lit("timer"))
    cols = ["series", "bucket", "max", "avg"]
    return levels.select(*cols).unionByName(timer.select(*cols)).orderBy("series", "bucket")


def consumer_lag(inputs: Inputs, bucket_ms: int) -> DataFrame:
    return _gauge(inputs.metrics, "delaymq_consumer_lag", ["group", "topic"], bucket_ms)


def client_traces(inputs: Inputs) -> DataFrame:
    """From RMQ_SYS_TRACE_TOPIC: publish and consume counts and cost percentiles per trace type and topic/group."""
    pct = F.percentile_approx("costTime", [0.5, 0.99], 10000)
    return (
        inputs.rmq_trace.groupBy("traceType", "topic", "group")
        .agg(
            F.count("*").alias("count"),
            F.sum(F.when(F.col("success"), 1).otherwise(0)).alias("success"),
            pct.getItem(0).alias("costP50"),
            pct.getItem(1).alias("costP99"),
        )
        .orderBy("traceType", "topic", "group")
    )


def time_span(inputs: Inputs) -> tuple[int, int]:
    """(min, max) timestamp over all inputs, for choosing a bucket size."""
    spans = []
    for df, col in ((inputs.traces, "deliveredTs"), (inputs.traces, "storeTs"), (inputs.metrics, "ts")):
        row = df.where(F.col(col) > 0).agg(F.min(col), F.max(col)).first()
        if row and row[0] is not None:
            spans.append((row[0], row[1]))
    if not spans:
        return 0, 0
    return min(s[0] for s in spans), max(s[1] for s in spans)


def choose_bucket_ms(span_ms: int) -> int:
    """About 60 buckets over the span, snapped to a readable size."""
    for size in (1_000, 5_000, 10_000, 30_000, 60_000, 300_000, 900_000, 3_600_000, 21_600_000, 86_400_000):
        if span_ms / size <= 60:
            return size
    return 86_400_000
