"""BrokerConfig: one typed object for every broker and store setting.

Keys are RocketMQ's (``brokerName``, ``mapedFileSizeCommitLog``, ...). Loaded
from a RocketMQ-style properties file; attribute names are the snake_case
forms of the keys. RocketMQ keys that mean nothing here (``NO_EFFECT_KEYS``:
thread-pool sizes, Netty tuning, page-count flush thresholds) are accepted
and noted once in the log at start; any other unknown key is a ConfigError.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import ClassVar

from protocol import names
from protocol.config import (
    ConfigError,
    PropertiesConfig,
    mask_secrets,
    not_a_key,
)
from protocol.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, parse_delay_levels
from protocol.namesrv_addr import split_namesrv_addr
from protocol.route import DEFAULT_MAX_QUEUE_NUMS, PERM_MAX
from protocol.trio.busy_poll import check_window_us
from protocol.trio.limits import ConnectionLimits, limits_of
from protocol.trio.preauth import DEFAULT_PRE_AUTH_BUDGET, pre_auth_problem
from protocol.trio.tls import (
    ClientTls,
    ServerTls,
    TlsConfigError,
    normalize_server_tls,
    server_tls_of,
)

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
MAX_CONTROLLERS = 16  # controllerAddr entries



class FlushDiskType(StrEnum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class BrokerRole(StrEnum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


_THREADS = "requests are served on one trio event loop: there is no thread pool to size"
_QUEUE = "requests are served on one trio event loop: there is no thread-pool queue to bound"
_NETTY = "the remoting layer is trio, not Netty"
_FLUSH = "a flush writes whatever is dirty every flushInterval* ms (no page-count threshold)"
_FILES = "files are unmapped and deleted at once: nothing is left hanging to retry"

# RocketMQ 4.x (and 3.x template) keys accepted for compatibility that change nothing here.
NO_EFFECT_KEYS: dict[str, str] = {
    **{k: _THREADS for k in (
        "sendMessageThreadPoolNums", "pullMessageThreadPoolNums", "queryMessageThreadPoolNums",
        "adminBrokerThreadPoolNums", "clientManageThreadPoolNums", "consumerManageThreadPoolNums",
        "heartbeatThreadPoolNums", "endTransactionThreadPoolNums",
        "processReplyMessageThreadPoolNums", "useReentrantLockWhenPutMessage",
    )},
    **{k: _QUEUE for k in (
        "sendThreadPoolQueueCapacity", "pullThreadPoolQueueCapacity",
        "queryThreadPoolQueueCapacity", "clientManagerThreadPoolQueueCapacity",
        "consumerManagerThreadPoolQueueCapacity", "heartbeatThreadPoolQueueCapacity",
        "endTransactionPoolQueueCapacity", "replyThreadPoolQueueCapacity",
    )},
    **{k: _NETTY for k in (
        "serverWorkerThreads", "serverCallbackExecutorThreads", "serverSelectorThreads",
        "serverOnewaySemaphoreValue", "serverAsyncSemaphoreValue",
        "serverSocketSndBufSize", "serverSocketRcvBufSize",
        "serverPooledByteBufAllocatorEnable", "useEpollNativeSelector",
        "clientWorkerThreads", "clientCallbackExecutorThreads", "clientOnewaySemaphoreValue",
        "clientAsyncSemaphoreValue", "clientChannelMaxIdleTimeSeconds",
        "clientSocketSndBufSize", "clientSocketRcvBufSize",
        "clientPooledByteBufAllocatorEnable",
    )},
    **{k: _FLUSH for k in (
        "flushCommitLogLeastPages", "flushConsumeQueueLeastPages",
        "flushCommitLogThoroughInterval", "flushConsumeQueueThoroughInterval",
        "commitCommitLogLeastPages",
        "commitCommitLogThoroughInterval", "commitIntervalCommitLog", "flushCommitLogTimed",
    )},
    **{k: _FILES for k in ("destroyMapedFileIntervalForcibly", "redeleteHangedFileInterval")},
    "flushLeastPagesWhenWarmMapedFile": "a warm file is fdatasynced every 1 MiB as its zeros "
                                        "are written",
    "checkTransactionMessageEnable": "a RocketMQ 3.x switch with no counterpart here",
    "transientStorePoolEnable": "appends go straight to the mapped file (no off-heap pool)",
    "transientStorePoolSize": "appends go straight to the mapped file (no off-heap pool)",
    "rocketmqHome": "nothing is read from a RocketMQ installation",
}


@dataclass(frozen=True)
class BrokerCredentials:
    """The broker's own account (brokerAccessKey/brokerSecretKey)."""

    access_key: str
    secret_key: str
    security_token: str | None = None

    def __repr__(self) -> str:  # never show the secret
        return f"BrokerCredentials(access_key={self.access_key!r}, secret_key='***')"


@dataclass(slots=True)
class BrokerConfig(PropertiesConfig):
    NO_EFFECT_KEYS: ClassVar[dict[str, str]] = NO_EFFECT_KEYS

    # identity
    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = "broker-a"
    broker_id: int = 0
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    broker_ip1: str = "127.0.0.1"
    listen_port: int = 10911
    # the address the listeners bind (remoting, HA, metrics), RocketMQ's bindAddress;
    # empty: 127.0.0.1 when brokerIP1 is 127.0.0.1, else 0.0.0.0. Set apart from
    # brokerIP1 when what brokerIP1:listenPort reaches is a proxy in front of the
    # broker (bench/chaos: clients and slaves reach the master through one)
    bind_address: str = ""
    namesrv_addr: str = ""
    # registration
    register_broker_interval_ms: int = 30_000
    register_broker_timeout_ms: int = 6_000
    compressed_register: bool = False  # always compress (bodies over 1 MiB always are)
    # topics
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 4
    max_queue_nums: int = DEFAULT_MAX_QUEUE_NUMS  # most read/write queues one topic may have
    broker_permission: int = 6
    # the topics named after the broker and its cluster (RocketMQ's): readable and
    # writable (mqadmin sendMsgStatus and clusterRT send to them), else neither
    broker_topic_enable: bool = True
    cluster_topic_enable: bool = True
    # message trace (docs/trace.md): the trace topic is made at start (1 queue) and
    # registered; send responses carry regionId and traceOn (traceOn=false: clients
    # with trace on record nothing of sends to this broker)
    trace_topic_enable: bool = False
    msg_trace_topic_name: str = names.RMQ_SYS_TRACE_TOPIC
    region_id: str = "DefaultRegion"
    trace_on: bool = True
    # messages
    max_message_size: int = 4 * MiB
    max_frame_size: int = 16 * MiB
    # µs the event loop keeps polling after a request instead of sleeping
    # (protocol/trio/busy_poll.py): lower latency for CPU; 0 (off) by default
    busy_poll_micros: int = 0
    # SYNC_FLUSH: fsync the commit log through Linux AIO where it works (no thread
    # hand-over); false keeps every fsync in the group commit's thread
    aio_fsync_enable: bool = True
    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL
    # store
    store_path_root_dir: str = field(default_factory=lambda: str(Path.home() / "store"))
    # where each part lives; empty: under storePathRootDir, as RocketMQ
    store_path_commit_log: str = ""  # <root>/commitlog
    store_path_consume_queue: str = ""  # <root>/consumequeue
    store_path_index: str = ""  # <root>/index
    store_checkpoint: str = ""  # <root>/checkpoint
    abort_file: str = ""  # <root>/abort
    maped_file_size_commit_log: int = 1 * GiB
    maped_file_size_consume_queue: int = 300_000 * 20
    # commit-log files made ahead of need get zeros written into every block
    # (allocation.py): a SYNC_FLUSH fsync then commits no journal for them
    warm_maped_file_enable: bool = False
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commit_log: int = 500
    # ASYNC_FLUSH: when puts write at least writeBehindCommitLogLeastPages pages of
    # 4 KiB within this many ms (0: never), the commit log's bytes not yet fsynced are
    # handed to the disk without waiting, so the fsync's kernel work comes in pieces
    write_behind_interval_commit_log: int = 10
    write_behind_commit_log_least_pages: int = 64
    flush_interval_consume_queue: int = 1000
    sync_flush_timeout: int = 5000
    max_transfer_bytes_on_message_in_memory: int = 256 * KiB
    max_transfer_count_on_message_in_memory: int = 400  # RocketMQ 5.x; the byte cap applies too
    # index
    message_index_enable: bool = True
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    # cleanup
    delete_when: str = "04"  # hour(s) of the day to delete expired files, e.g. "04" or "04;05"
    file_reserved_time: int = 72  # hours a commit-log file is kept
    disk_max_used_space_ratio: int = 75  # % used: past this, expired files go at once
    disk_space_clean_forcibly_ratio: int = 85  # % used: past this, oldest files go even if young
    disk_space_warning_level_ratio: int = 90  # % used: past this, writes are refused
    clean_resource_interval: int = 10_000  # ms between cleanup runs
    delete_files_batch_max: int = 10  # files deleted per run at most
    # delay and retry
    schedule_tick_millis: int = 100
    # timer messages (TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS, gRPC
    # delivery_timestamp): off refuses them; precision: slots of this many ms
    timer_wheel_enable: bool = True
    timer_precision_ms: int = 1000
    timer_max_delay_sec: int = 259_200  # 3 days: a later delivery time is refused
    max_reconsume_times: int = 16
    # transactions
    transaction_check_interval: int = 60_000  # ms between check passes over the half queue
    transaction_time_out: int = 6_000  # ms after its birth before a half message is checked
    transaction_check_max: int = 15  # checks before a half message is discarded
    reject_transaction_message: bool = False  # refuse prepared (half) messages
    # pending (neither committed nor rolled back) transactions of one producer
    # group; a prepared send past it is answered SYSTEM_BUSY. Each pending one is
    # read and sent to a producer every check pass and held in the transaction
    # book; 10 000 is far above what live producers leave undecided (a group at
    # 1000 transactions/s with 1% left UNKNOW for the 15 checks of 60 s holds
    # ~9 000) and caps a group that answers no check (20 000 x 16 KiB in issue 48)
    transaction_max_pending_per_group: int = 10_000
    # consumer offsets
    flush_consumer_offset_interval: int = 5000
    # pull
    long_polling_enable: bool = True
    long_polling_max_suspend_millis: int = 15_000
    max_held_pulls: int = 100_000  # long-polling pulls held at once, broker-wide
    max_held_pulls_per_connection: int = 1_024  # ... and from one connection
    # POP consumption (RocketMQ 5's SimpleConsumer; docs/pop.md)
    pop_inflight_message_threshold: int = 10_000  # popped, un-acked messages of one group
    pop_inflight_total_threshold: int = 200_000  # ... of all groups on this broker
    max_pop_polling_size: int = 10_000  # pops held by long polling at once
    revive_interval: int = 1_000  # ms between passes re-putting expired in-flight messages
    pop_log_checkpoint_bytes: int = 64 * MiB  # the in-flight log is rewritten past this
    # SQL92 subscriptions (filters on message properties); off: refused, as RocketMQ
    enable_property_filter: bool = False
    # housekeeping
    channel_expired_timeout: int = 120_000
    # connections: what one client may make the broker hold (protocol/trio/limits.py)
    server_channel_max_idle_time_seconds: int = 120  # no traffic, or owed bytes unread
    frame_read_timeout_seconds: int = 30  # a started frame must complete within
    write_buffer_high_water_mark: int = 4 * MiB  # owed to a peer: stop reading its requests
    write_buffer_low_water_mark: int = 1 * MiB  # ... until it is back under this
    max_total_connection_buffer_bytes: int = 256 * MiB  # owed + partial frames, all peers
    max_in_flight_requests_per_connection: int = 4096  # taken, not answered: SYSTEM_BUSY past it
    max_connections_per_address: int = 1024  # 0: no limit
    # request lanes (RocketMQ's thread-pool queues): waited longer -> SYSTEM_BUSY
    wait_time_mills_in_send_queue: int = 200
    wait_time_mills_in_pull_queue: int = 5_000
    wait_time_mills_in_heartbeat_queue: int = 31_000
    wait_time_mills_in_transaction_queue: int = 3_000
    heartbeat_lane_percent: int = 50  # most of the event loop heart beats may use
    # master/slave replication (HA)
    ha_listen_port: int = 0  # 0: listenPort + 1
    # Prometheus metrics over HTTP on this port of listenIp (0: off)
    metrics_port: int = 0
    # apache.rocketmq.v2 gRPC for RocketMQ 5's clients on this port of listenIp
    # (broker/grpc/, docs/grpc.md; 0: a free port, for tests)
    enable_grpc: bool = False
    grpc_listen_port: int = 8081
    # the largest gRPC request message (0: maxMessageSize + 1 MiB, at least 16 MiB)
    grpc_max_inbound_message_size: int = 0
    # a gRPC send whose message type is not its topic's message.type attribute is
    # refused (RocketMQ 5 proxy's enableTopicMessageTypeCheck; docs/grpc.md)
    enable_topic_message_type_check: bool = True
    # push consumers over gRPC (docs/grpc.md): a receive with auto_renew is
    # invisible this long, and renewed while the client consumes: within
    # renewAheadTimeMillis of its end, by renewSliceTimeMillis, for at most
    # renewMaxTimeMillis in all (RocketMQ 5 proxy's keys); a pass every
    # renewSchedulePeriodMillis; at most renewMaxHandlesPerClient handles of one
    # client and renewMaxHandles in all are renewed (past them: the oldest stop)
    default_invisible_time_mills: int = 60_000
    renew_ahead_time_millis: int = 10_000
    renew_slice_time_millis: int = 60_000
    renew_max_time_millis: int = 3 * 3600 * 1000
    renew_schedule_period_millis: int = 5_000
    renew_max_handles_per_client: int = 10_000
    renew_max_handles: int = 200_000
    ha_send_heartbeat_interval: int = 5000  # ms: a slave reports its offset at least this often
    ha_housekeeping_interval: int = 20_000  # ms of silence after which an HA connection closes
    ha_transfer_batch_size: int = 32 * KiB  # most commit-log bytes in one transfer
    # connections open at once on the HA port (past it a new one is closed at once, or
    # takes the slot of the oldest still in its hello). A master has a few slaves (each
    # one connection, two while it reconnects); 64 leaves room for many and bounds
    # what connections can make the master hold (see broker/ha_service.py)
    ha_max_connections: int = 64
    slave_sync_interval: int = 10_000  # ms between a slave's metadata copies from its master
    ha_master_address: str = ""  # a slave's master HA address (empty: from the name server)
    ha_slave_fallbehind_max: int = 256 * MiB  # SYNC_MASTER: a slave further behind is not used
    # SYNC_MASTER: sends waiting and no acknowledgement progress for this many ms make
    # the slave unavailable (SLAVE_NOT_AVAILABLE at once) until it acknowledges again
    ha_slave_silent_ms: int = 1000
    # a master starting waits at most this many ms for the slaves the name servers
    # list to describe their logs before it takes writes (0: no wait)
    ha_master_start_wait_ms: int = 5000
    # a master whose log is a prefix of a slave's (it lost data) copies the slave's
    # log, then serves; false: it refuses writes until an operator chooses
    recover_from_slave: bool = False
    # a slave whose master refuses its log (diverged, or longer than the master's)
    # empties its store and copies the master's afresh; once, then set back to false
    ha_discard_log: bool = False
    # controller mode (RocketMQ 5, RIP-44; docs/replication.md): the SyncStateSet
    # decides what a SYNC_MASTER send needs, what consumers see, and how a replica
    # that diverged rejoins (it truncates to the last point its log shares)
    enable_controller_mode: bool = False
    # a SYNC_MASTER send is acknowledged once this many SyncStateSet members (the
    # master counting) hold it; a set smaller than this refuses sends
    # (IN_SYNC_REPLICAS_NOT_ENOUGH)
    min_in_sync_replicas: int = 1
    all_ack_in_sync_state_set: bool = False  # true: every SyncStateSet member must hold it
    # ms a SyncStateSet member may stay behind the master's end before the master
    # proposes it out of the set
    ha_max_time_slave_not_catchup: int = 15_000
    # the broker's side of controller mode (broker/replicas.py; docs/controller.md):
    # the controllers ('host:port;host:port'; the leader is found by trying them),
    # the heart-beat timeout the controller is asked to apply to this broker (ms),
    # ms between heart-beats, the election priority (lower: elected first) and ms
    # between polls of the controller's replica info (a lost notification repaired).
    # Without controllerAddr a broker in controller mode keeps its configured role.
    controller_addr: str = ""
    controller_heart_beat_timeout_mills: int = 10_000
    broker_heartbeat_interval: int = 1000
    broker_election_priority: int = 2**31 - 1
    sync_broker_metadata_period: int = 5000
    # reading from slaves
    slave_read_enable: bool = False  # a master may suggest a slave for cold reads
    access_message_in_memory_max_ratio: int = 40  # % of memory behind the max offset: cold
    # plain ACL (RocketMQ's aclEnable): requests are checked against plain_acl.yml
    acl_enable: bool = False
    # the accounts file; empty: plain_acl.yml beside the config file the broker was
    # started from, else in storePathRootDir
    acl_plain_file: str = ""
    acl_reload_interval: int = 5000  # ms between checks of the accounts file's mtime
    # signatures bound to their request code and time (docs/security/signature-binding.md):
    # a bound signature's time must be within this many ms of the clock, either way
    acl_signature_window: int = 60_000
    # gRPC (RocketMQ 5 clients, docs/grpc.md): a signed call's x-mq-date-time must be
    # within this many ms of the broker's clock, either way
    acl_grpc_date_time_window: int = 900_000
    # true: every signed request needs the binding, not only admin and destructive ones
    # (RocketMQ's own clients, which do not bind, are then refused)
    acl_strict_signature: bool = False
    # most bound data-path signatures remembered against replays (~220 bytes each)
    acl_replay_cache_size: int = 100_000
    # before a connection is authenticated (a request on it passed the ACL check;
    # docs/security/decoding-limits.md): the largest frame it may send (0: the header
    # limit, 256 KiB, + maxMessageSize + 64 KiB), and the bytes of partial frames all
    # such connections may hold together
    acl_pre_auth_max_frame_bytes: int = 0
    acl_pre_auth_read_budget_bytes: int = DEFAULT_PRE_AUTH_BUDGET
    # the broker's own ACL account (issue 18): when set, its requests to name servers
    # and to its master, and a slave's HA hello, are signed with it
    broker_access_key: str = ""
    broker_secret_key: str = field(default="", repr=False)  # never in a repr or a log
    # TLS (protocol/trio/tls.py), RocketMQ's keys. Served: tlsMode disabled | permissive
    # (TLS and plain on one port; plain only without a certificate) | enforcing, on the
    # remoting and HA ports. Used: tls.enable for the broker's own connections (name
    # servers, its master, the HA link), checked against tls.client.trustCertPath.
    tls_mode: str = "permissive"
    tls_server_cert_path: str = ""
    tls_server_key_path: str = ""
    tls_server_trust_cert_path: str = ""  # the CA of client certificates
    tls_server_need_client_auth: str = "none"  # none | optional | require (true/false)
    tls_enable: bool = False
    tls_client_trust_cert_path: str = ""  # empty: the system's CAs
    tls_client_cert_path: str = ""  # for servers with tls.server.need.client.auth
    tls_client_key_path: str = ""
    # RocketMQ keys seen that have no effect here (key -> value), noted at start
    no_effect_keys: dict[str, str] = not_a_key(dict)

    def validate(self) -> None:
        """Names and addresses follow protocol.names; raises ConfigError naming the key."""
        checks = [
            ("brokerName", names.broker_name_problem(self.broker_name)),
            ("brokerClusterName", names.cluster_name_problem(self.broker_cluster_name)),
            ("msgTraceTopicName", names.topic_problem(self.msg_trace_topic_name)),
            ("regionId", names.topic_problem(self.region_id)),
            ("brokerIP1", names.addr_problem(f"{self.broker_ip1}:{self.listen_port}")),
        ]
        checks += [("namesrvAddr", names.addr_problem(a)) for a in self.namesrv_addr_list]
        for key, problem in checks:
            if problem is not None:
                raise ConfigError(f"{key}: {problem}")
        if not 0 < self.max_queue_nums <= 65535:
            raise ConfigError("maxQueueNums must be within 1..65535")
        if not 0 < self.default_topic_queue_nums <= self.max_queue_nums:
            raise ConfigError("defaultTopicQueueNums must be within 1..maxQueueNums")
        for key, value in (("writeBehindIntervalCommitLog", self.write_behind_interval_commit_log),
                           ("writeBehindCommitLogLeastPages",
                            self.write_behind_commit_log_least_pages)):
            if value < 0:
                raise ConfigError(f"{key} must not be negative, not {value}")
        for key, value in (("flushIntervalCommitLog", self.flush_interval_commit_log),
                           ("flushIntervalConsumeQueue", self.flush_interval_consume_queue),
                           ("transactionCheckInterval", self.transaction_check_interval),
                           ("transactionTimeOut", self.transaction_time_out),
                           ("transactionCheckMax", self.transaction_check_max),
                           ("transactionMaxPendingPerGroup",
                            self.transaction_max_pending_per_group),
                           ("popInflightMessageThreshold", self.pop_inflight_message_threshold),
                           ("popInflightTotalThreshold", self.pop_inflight_total_threshold),
                           ("maxPopPollingSize", self.max_pop_polling_size),
                           ("reviveInterval", self.revive_interval),
                           ("popLogCheckpointBytes", self.pop_log_checkpoint_bytes),
                           ("timerPrecisionMs", self.timer_precision_ms),
                           ("timerMaxDelaySec", self.timer_max_delay_sec),
                           ("renewAheadTimeMillis", self.renew_ahead_time_millis),
                           ("renewMaxTimeMillis", self.renew_max_time_millis),
                           ("renewSchedulePeriodMillis", self.renew_schedule_period_millis),
                           ("renewMaxHandlesPerClient", self.renew_max_handles_per_client),
                           ("renewMaxHandles", self.renew_max_handles)):
            if value <= 0:
                raise ConfigError(f"{key} must be positive, not {value}")
        if self.renew_slice_time_millis <= self.renew_ahead_time_millis:
            raise ConfigError("renewSliceTimeMillis must be longer than renewAheadTimeMillis")
        if not 1_000 <= self.default_invisible_time_mills <= 12 * 3600 * 1000:
            raise ConfigError("defaultInvisibleTimeMills must be within 1000..43200000 ms")
        problem = self.connection_limits().problem()
        if problem is not None:
            raise ConfigError(f"connection limits: {problem}")
        self._validate_messages()
        if not 1 <= self.heartbeat_lane_percent <= 100:
            raise ConfigError("heartbeatLanePercent is a percentage (1..100)")
        try:
            check_window_us(self.busy_poll_micros, "busyPollMicros")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self._validate_role()
        self._validate_ha()
        self._validate_tls()

    def _validate_messages(self) -> None:
        """Rules across keys that a send or a stored record depends on."""
        if self.max_message_size <= 0:
            raise ConfigError(f"maxMessageSize must be positive, not {self.max_message_size}")
        if self.max_message_size > self.max_frame_size:
            raise ConfigError(f"maxMessageSize must not exceed maxFrameSize ({self.max_frame_size})")
        if not 0 <= self.broker_permission <= PERM_MAX:
            raise ConfigError(f"brokerPermission must be within 0..{PERM_MAX}, "
                              f"not {self.broker_permission}")
        self.delay_level_table()  # each entry a number with s/m/h/d

    def _validate_tls(self) -> None:
        try:
            normalize_server_tls(self)
        except TlsConfigError as exc:
            raise ConfigError(str(exc)) from exc
        if bool(self.tls_client_cert_path) != bool(self.tls_client_key_path):
            raise ConfigError("tls.client.certPath and tls.client.keyPath must be given together")

    def server_tls(self) -> ServerTls:
        return server_tls_of(self)

    def client_tls(self) -> ClientTls | None:
        """TLS for the broker's own connections (None: plain, tls.enable=false)."""
        if not self.tls_enable:
            return None
        return ClientTls(ca_path=self.tls_client_trust_cert_path,
                         cert_path=self.tls_client_cert_path, key_path=self.tls_client_key_path)

    def _validate_role(self) -> None:
        """brokerId 0 is the master, > 0 a slave (ARCHITECTURE 5; RocketMQ's BrokerStartup)."""
        if self.broker_id < 0:
            raise ConfigError(f"brokerId must be 0 (master) or more (slave), not {self.broker_id}")
        if self.broker_role is BrokerRole.SLAVE and self.broker_id == 0:
            raise ConfigError("brokerRole SLAVE needs a brokerId > 0 (brokerId 0 is the master)")
        if self.broker_role is not BrokerRole.SLAVE and self.broker_id != 0:
            raise ConfigError(
                f"brokerId {self.broker_id} is a slave's, but brokerRole is "
                f"{self.broker_role.value}: a master has brokerId 0, a slave brokerRole SLAVE"
            )

    def broker_credentials(self) -> BrokerCredentials | None:
        """brokerAccessKey/brokerSecretKey as RemotingClient(credentials=...) takes them."""
        if not self.broker_access_key:
            return None
        return BrokerCredentials(self.broker_access_key, self.broker_secret_key)

    def _validate_ha(self) -> None:
        if self.acl_reload_interval <= 0:
            raise ConfigError(f"aclReloadInterval must be positive, not {self.acl_reload_interval}")
        for key, value in (("aclSignatureWindow", self.acl_signature_window),
                           ("aclReplayCacheSize", self.acl_replay_cache_size),
                           ("aclGrpcDateTimeWindow", self.acl_grpc_date_time_window)):
            if value <= 0:
                raise ConfigError(f"{key} must be positive, not {value}")
        problem = pre_auth_problem(self)
        if problem is not None:
            raise ConfigError(problem)
        if bool(self.broker_access_key) != bool(self.broker_secret_key):
            raise ConfigError("brokerAccessKey and brokerSecretKey go together: set both or neither")
        if not 0 <= self.metrics_port <= 65535:
            raise ConfigError("metricsPort must be 0 (off) or a port")
        if not 0 <= self.grpc_listen_port <= 65535:
            raise ConfigError("grpcListenPort must be a port (0: a free one)")
        if self.enable_grpc and self.listen_port and self.grpc_listen_port == self.listen_port:
            raise ConfigError(f"grpcListenPort {self.grpc_listen_port} is the listenPort")
        if self.grpc_max_inbound_message_size != 0 and not (
                self.max_message_size < self.grpc_max_inbound_message_size <= 1024 * MiB):
            raise ConfigError("grpcMaxInboundMessageSize must be 0 (automatic) or larger than "
                              "maxMessageSize and at most 1 GiB")
        if not 0 <= self.ha_listen_port <= 65535:
            raise ConfigError("haListenPort must be within 1..65535 (0: listenPort + 1)")
        if self.listen_port and self.ha_port == self.listen_port:
            raise ConfigError(f"haListenPort {self.ha_port} is the listenPort")
        if self.listen_port and self.ha_port > 65535:
            raise ConfigError(f"haListenPort defaults to listenPort + 1 = {self.ha_port}, "
                              "past 65535: set haListenPort")
        if self.bind_address:
            try:
                ipaddress.IPv4Address(self.bind_address)
            except ValueError:
                raise ConfigError(f"bindAddress must be an IPv4 address, not "
                                  f"{self.bind_address!r}") from None
        if self.ha_master_address:
            problem = names.addr_problem(self.ha_master_address)
            if problem is not None:
                raise ConfigError(f"haMasterAddress: {problem}")
        for key, value in (("haSendHeartbeatInterval", self.ha_send_heartbeat_interval),
                           ("haHousekeepingInterval", self.ha_housekeeping_interval),
                           ("haTransferBatchSize", self.ha_transfer_batch_size)):
            if value <= 0:
                raise ConfigError(f"{key} must be positive, not {value}")
        if self.ha_slave_fallbehind_max < 0:
            raise ConfigError("haSlaveFallbehindMax must not be negative")
        if not 1 <= self.ha_max_connections <= 65536:
            raise ConfigError(f"haMaxConnections must be within 1..65536, "
                              f"not {self.ha_max_connections}")
        for key, value in (("haSlaveSilentMs", self.ha_slave_silent_ms),
                           ("haMasterStartWaitMs", self.ha_master_start_wait_ms)):
            if not 0 <= value <= 3_600_000:
                raise ConfigError(f"{key} must be within 0..3600000 ms, not {value}")
        if not 1 <= self.min_in_sync_replicas <= 64:  # sync_state.MAX_MEMBERS
            raise ConfigError("minInSyncReplicas must be within 1..64, "
                              f"not {self.min_in_sync_replicas}")
        if not 0 < self.ha_max_time_slave_not_catchup <= 3_600_000:
            raise ConfigError("haMaxTimeSlaveNotCatchup must be within 1..3600000 ms, "
                              f"not {self.ha_max_time_slave_not_catchup}")
        self._validate_controller_keys()
        if not 0 <= self.access_message_in_memory_max_ratio <= 100:
            raise ConfigError("accessMessageInMemoryMaxRatio is a percentage (0..100)")

    def _validate_controller_keys(self) -> None:
        for a in self.controller_addr_list:
            problem = names.addr_problem(a)
            if problem is not None:
                raise ConfigError(f"controllerAddr: {problem}")
        if len(self.controller_addr_list) > MAX_CONTROLLERS:
            raise ConfigError(f"controllerAddr: at most {MAX_CONTROLLERS} controllers")
        for key, value, lo, hi in (
                ("controllerHeartBeatTimeoutMills", self.controller_heart_beat_timeout_mills,
                 100, 3_600_000),
                ("brokerHeartbeatInterval", self.broker_heartbeat_interval, 10, 600_000),
                ("syncBrokerMetadataPeriod", self.sync_broker_metadata_period, 100, 3_600_000),
                ("brokerElectionPriority", self.broker_election_priority, 0, 2**31 - 1)):
            if not lo <= value <= hi:
                raise ConfigError(f"{key} must be within {lo}..{hi}, not {value}")
        if (self.enable_controller_mode
                and self.broker_heartbeat_interval >= self.controller_heart_beat_timeout_mills):
            raise ConfigError("brokerHeartbeatInterval must be shorter than "
                              "controllerHeartBeatTimeoutMills (the controller would "
                              "think the broker dead between two heart-beats)")

    @property
    def controller_addr_list(self) -> list[str]:
        """controllerAddr's addresses, in order, without repeats."""
        parts = [a.strip() for a in self.controller_addr.split(";") if a.strip()]
        return list(dict.fromkeys(parts))

    def connection_limits(self) -> ConnectionLimits:
        return limits_of(self)

    def delay_level_table(self) -> dict[int, int]:
        """Delay level (1-based) -> milliseconds, from ``messageDelayLevel``.

        Raises ConfigError for an entry that is not a number with s/m/h/d.
        """
        try:
            return parse_delay_levels(self.message_delay_level)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc

    @property
    def grpc_max_inbound(self) -> int:
        """The largest gRPC request message taken (grpcMaxInboundMessageSize, or
        automatic: room for a message of maxMessageSize and its properties)."""
        return self.grpc_max_inbound_message_size or max(16 * MiB, self.max_message_size + MiB)

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def namesrv_addr_list(self) -> list[str]:
        return split_namesrv_addr(self.namesrv_addr)

    def store_path(self, *parts: str) -> Path:
        return Path(self.store_path_root_dir).joinpath(*parts)

    @property
    def listen_host(self) -> str:
        """The address the listeners bind: bindAddress, else 127.0.0.1 for a
        broker whose brokerIP1 is 127.0.0.1 and 0.0.0.0 for any other."""
        if self.bind_address:
            return self.bind_address
        return "127.0.0.1" if self.broker_ip1 == "127.0.0.1" else "0.0.0.0"

    @property
    def is_slave(self) -> bool:
        return self.broker_role is BrokerRole.SLAVE

    @property
    def ha_port(self) -> int:
        """The HA listen port: haListenPort, or listenPort + 1 when not set."""
        return self.ha_listen_port or self.listen_port + 1

    def _part(self, configured: str, default: str) -> Path:
        return Path(configured) if configured else self.store_path(default)

    @property
    def commit_log_path(self) -> Path:
        return self._part(self.store_path_commit_log, "commitlog")

    @property
    def consume_queue_path(self) -> Path:
        return self._part(self.store_path_consume_queue, "consumequeue")

    @property
    def index_path(self) -> Path:
        return self._part(self.store_path_index, "index")

    @property
    def checkpoint_path(self) -> Path:
        return self._part(self.store_checkpoint, "checkpoint")

    @property
    def abort_path(self) -> Path:
        return self._part(self.abort_file, "abort")

    def effective_properties(self) -> dict[str, str]:
        """``to_properties`` with derived values filled in (store paths, haListenPort)."""
        props = self.to_properties()
        props.update({
            "storePathCommitLog": str(self.commit_log_path),
            "storePathConsumeQueue": str(self.consume_queue_path),
            "storePathIndex": str(self.index_path),
            "storeCheckpoint": str(self.checkpoint_path),
            "abortFile": str(self.abort_path),
            "haListenPort": str(self.ha_port),
        })
        return props

    def no_effect_notices(self) -> list[tuple[str, str, str]]:
        """(key, value, reason) of each RocketMQ key given that has no effect here
        (logged at start, printed by ``-p``): a secret's value masked."""
        shown = mask_secrets(self.no_effect_keys)
        return [(k, shown[k], self.NO_EFFECT_KEYS[k]) for k in self.no_effect_keys]

    def render(self) -> str:
        """The effective config (``mqbroker -p``, GET_BROKER_CONFIG); keys without
        effect as comments; every secret's value masked (protocol.config.mask_secrets)."""
        lines = [f"{k}={v}" for k, v in mask_secrets(self.effective_properties()).items()]
        lines += [f"# {k}={v} has no effect here: {why}" for k, v, why in self.no_effect_notices()]
        return "\n".join(lines)


__all__ = ["BrokerConfig", "BrokerRole", "ConfigError", "FlushDiskType"]
