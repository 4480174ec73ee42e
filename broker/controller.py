"""BrokerController: wires config, managers, store, processors and services.

Every background service is a task in the controller's nursery. ``run()``
returns after an orderly shutdown (``request_shutdown``): unregister from the
name servers, stop serving, persist managers, flush and close the store.

The role (``brokerRole``, ``brokerId``, a slave's master) is a live value,
``self.role`` (broker/role.py): request handlers read it, never the config.
The services of one role run in their own task group (``role_runner``): a
master's HA listener, schedule (delay) service and transaction checks; a
slave's HA client and metadata sync. ``change_role`` moves the running
broker to another role; a SLAVE refuses sends (send_processor) and serves
reads, and its store refuses puts (the write fence).

No background service can kill the broker: each iteration runs under a
``Guard`` (protocol/trio/service.py) that logs a failure once with its
traceback, keeps repeats quiet, backs off and goes on. Persisted tables are
snapshotted on the event loop and written in a worker thread.
"""

from __future__ import annotations

import gc
import random
import secrets
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
import trio

from acl.binding import signature_binding
from acl.guard import AclFile, HeaderGate, guard_table
from acl.plain import Need, Perm
from broker.acl.admin_processor import AclAdminProcessor
from broker.acl.stored import ResourceCheck
from broker.admin_processor import AdminBrokerProcessor
from broker.broker_to_client import Broker2Client, RemotingConsumerLink, RemotingReply
from broker.client_manage_processor import ClientManageProcessor, RemotingNotifier
from broker.client_manager import ClientGroups, RebalanceLockManager
from broker.config import BrokerConfig, BrokerRole, FlushDiskType
from broker.config_load import LoadedConfig
from broker.consumer_filter_manager import ConsumerFilterManager
from broker.consumer_manage_processor import ConsumerManageProcessor
from broker.consumer_offset_manager import ConsumerOffsetManager
from broker.end_transaction_processor import EndTransactionProcessor
from broker.group_commit import GroupCommitService
from broker.ha_service import HAService
from broker.journal_writer import JournalWriter
from broker.metrics import BrokerCollector, broker_registry, frozen_registry
from broker.ops_processor import OpsProcessor
from broker.out_api import BrokerOuterAPI
from broker.persist import ConfigSnapshot, SnapshotTable
from broker.pop.core import HandleCodec, PopTable
from broker.pop_processor import PopMessageProcessor, PopRunner, send_back_reviver
from broker.pull_processor import PullMessageProcessor
from broker.query_processor import QueryMessageProcessor
from broker.queue_admin_processor import QueueAdminProcessor
from broker.replicas import ControllerView, RegisterRetry
from broker.replicas_manager import ReplicaHooks, ReplicasManager
from broker.role import Role, RoleRunner, RoleState, services_key
from broker.schedule_service import ScheduleMessageService
from broker.send_processor import SendMessageProcessor
from broker.service.admin import AdminService, AdminTables, RuntimeSources
from broker.service.broker2client import Broker2ClientService
from broker.service.clients import ClientService
from broker.service.config import ConfigService
from broker.service.offsets import OffsetService
from broker.service.ops import OpsService
from broker.service.pop import PopService
from broker.service.pull import PullService
from broker.service.queries import QueryService
from broker.service.send import SendService
from broker.service.transactions import TransactionService
from broker.service.types import SessionChannel
from broker.slave_synchronize import SlaveSynchronize
from broker.stats import TICK_INTERVAL_S, BrokerStats, LatencyHistogram
from broker.store import DefaultMessageStore, StoreConfig
from broker.store.ha.sync_state import SyncStateError
from broker.store.ha.sync_state import SyncStateSet as HASyncStateSet
from broker.store.index_service import IndexService
from broker.store.pop_log import PopLog
from broker.subscription_group_manager import SubscriptionGroupManager
from broker.timer.recall_processor import RecallMessageProcessor
from broker.timer.service import TimerService
from broker.topic_config_manager import TopicConfigManager
from broker.topic_validator import RMQ_SYS_TRANS_HALF_TOPIC
from broker.transaction_service import Asked, CheckRequest, TransactionalMessageService
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.controller import EpochEntry, EpochEntryCache, NotifyBrokerRoleChangedRequestHeader
from protocol.extras import require_grpc
from protocol.route import TopicRouteData
from protocol.trio.busy_poll import BusyPoll
from protocol.trio.client import RemotingClient
from protocol.trio.connection import HandlerTable, RemotingConnection
from protocol.trio.limits import Lane, Lanes, SharedBudget
from protocol.trio.memory import trim_free_memory
from protocol.trio.metrics_http import MetricsServer
from protocol.trio.preauth import PreAuth, pre_auth_of
from protocol.trio.server import RemotingServer
from protocol.trio.service import Guard, describe

if TYPE_CHECKING:
    from broker.grpc.clients import GrpcClients
    from broker.grpc.push import PushConsumers
    from broker.grpc.server import GrpcServer

HOUSEKEEPING_INTERVAL_S = 10.0
# An admin's topic or subscription-group change not journaled within this many seconds
# is answered with an error.
TOPIC_DURABLE_TIMEOUT_S = 10.0
# The cycle collector's young generation threshold while serving (Python's default: 700).
YOUNG_GC_THRESHOLD = 20_000


def request_lanes(config: BrokerConfig) -> Lanes:
    """RocketMQ's processor thread pools as lanes of the event loop: a request
    that waited longer than its lane allows, or a heartbeat past its lane's
    share of the loop, is answered SYSTEM_BUSY."""
    lanes = Lanes()
    lanes.add(Lane("send", max_wait_ms=config.wait_time_mills_in_send_queue),
              [RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2,
               RequestCode.SEND_BATCH_MESSAGE, RequestCode.CONSUMER_SEND_MSG_BACK,
               RequestCode.RECALL_MESSAGE])
    lanes.add(Lane("pull", max_wait_ms=config.wait_time_mills_in_pull_queue),
              [RequestCode.PULL_MESSAGE, RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE,
               RequestCode.BATCH_ACK_MESSAGE, RequestCode.CHANGE_MESSAGE_INVISIBLETIME])
    lanes.add(Lane("heartbeat", share=config.heartbeat_lane_percent / 100,
                   max_wait_ms=config.wait_time_mills_in_heartbeat_queue),
              [RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT])
    lanes.add(Lane("transaction", max_wait_ms=config.wait_time_mills_in_transaction_queue),
              [RequestCode.END_TRANSACTION])
    return lanes


SLAVE_FIND_MASTER_S = 1.0  # s between a masterless slave's registrations
# why a slave's store refuses puts (it stores only what replication brings)
SLAVE_FENCE = "this broker is a slave: it stores only what its master replicates"
# controller mode: why the store refuses puts until the controller gave a role
CONTROLLER_FENCE = "controller mode: this broker waits for the controller to give its role"


class BrokerController:
    def __init__(self, config: LoadedConfig | BrokerConfig) -> None:
        # the effective config, loaded, overlaid and validated before anything starts
        # (broker/config_load.py); a BrokerConfig built in process is taken as it is
        loaded = config if isinstance(config, LoadedConfig) else LoadedConfig.of(config)
        self.loaded = loaded
        config = loaded.config
        # the properties file the broker was started from (mqbroker -c): keys an admin
        # changes at run time (UPDATE_BROKER_CONFIG) are written into it; without one
        # they go to the overlay file in the store, which the next load applies
        self.config_file = loaded.config_file
        self.config = config
        self.log = structlog.get_logger("broker").bind(broker=config.broker_name)
        self.config_service = ConfigService(loaded, self._config_applied,
                                            self.log.bind(service="config"))
        self.boot_timestamp_ms = int(time.time() * 1000)
        self.start_accept_send_timestamp_ms = 0
        # the live role: what request handlers read (broker/role.py); the config
        # follows it (brokerRole, brokerId: registrations, HA hellos, mqadmin)
        self.role = RoleState(config.broker_role, config.broker_id)
        self.role.observe(self._role_to_config)
        self.role_runner = RoleRunner(self.role, self._start_role_services,
                                      self._prepare_role, self._role_handed_over,
                                      self.log.bind(service="role"))
        # controller mode with controllers to ask (broker/replicas_manager.py): the
        # controller gives the role; a master takes the configured master role
        # (brokerRole; SYNC_MASTER when it says SLAVE)
        self.replicas: ReplicasManager | None = None
        self.controller_master_role = (config.broker_role if not config.is_slave
                                       else BrokerRole.SYNC_MASTER)
        self._loaded_as_slave = config.is_slave
        self._serving: trio.Nursery | None = None
        self._next_sync_state: HASyncStateSet | None = None
        # operators' figures (broker/stats.py): plain counters on the hot path
        self.stats = BrokerStats(config.broker_name, time.monotonic())
        self.put_latency = LatencyHistogram()
        self.flush_latency = LatencyHistogram()
        self.topic_config_manager = TopicConfigManager(config)
        self.consumer_offset_manager = ConsumerOffsetManager(config)
        self.subscription_group_manager = SubscriptionGroupManager(config)
        self.message_store = DefaultMessageStore(StoreConfig.from_broker(config))
        self.offset_service = OffsetService(self.consumer_offset_manager, self.message_store)
        self.consumer_manage_processor = ConsumerManageProcessor(self.offset_service)
        self.schedule_service = ScheduleMessageService(
            config, self.message_store, self.topic_config_manager, self.trigger_register
        )
        self.timer_service = TimerService(config, self.message_store)
        self.transaction_service = TransactionalMessageService(
            config, self.message_store, self.consumer_offset_manager, self.topic_config_manager,
            self.trigger_register,
        )
        self.end_transaction_service = TransactionService(
            config.broker_name, self.role, self.message_store, self.transaction_service,
            Guard(structlog.get_logger("broker.transaction").bind(broker=config.broker_name),
                  "end transaction"))
        self.end_transaction_processor = EndTransactionProcessor(
            self.end_transaction_service, lambda: self.acl_check)
        # spin after requests instead of sleeping (busyPollMicros; off by default)
        self.busy_poll = BusyPoll(config.busy_poll_micros)
        self.ha_service = HAService(config, self.message_store)
        self.group_commit: GroupCommitService | None = None
        if config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self.group_commit = GroupCommitService(
                partial(self.timed_flush_commit_log, prepare=False),
                config.sync_flush_timeout, config.broker_name,
                busy_poll=self.busy_poll,
                direct=self.message_store if config.aio_fsync_enable else None,
                observe=self.flush_latency.observe,
                next_file=self.message_store,
            )
        self.send_service = SendService(
            config, self.role, self.message_store, self.topic_config_manager,
            self.subscription_group_manager, self.transaction_service, self.schedule_service,
            on_topics_changed=self.trigger_register, record_put=self.stats.record_put,
            observe_put=self.put_latency.observe,
            wait_flush=self.group_commit.wait if self.group_commit is not None else None,
            wait_slave=self.ha_service.wait_slave)
        self.send_processor = SendMessageProcessor(self.send_service, config,
                                                   lambda: self.acl_check)
        self.consumer_manager = ClientGroups("consumer")
        self.consumer_filter_manager = ConsumerFilterManager()  # compiled SQL92 subscriptions
        self.producer_manager = ClientGroups("producer")
        self.lock_manager = RebalanceLockManager()
        self.client_service: ClientService[RemotingConnection | SessionChannel] = ClientService(
            producers=self.producer_manager, consumers=self.consumer_manager,
            groups=self.subscription_group_manager, topics=self.topic_config_manager,
            locks=self.lock_manager, settings=config, notifier=RemotingNotifier(),
            on_topics_changed=self.trigger_register, log=self.log.bind(service="clients"))
        self.client_manage_processor = ClientManageProcessor(self.client_service,
                                                             lambda: self.acl_check)
        # RocketMQ 5 clients (gRPC) in the same tables, by their client id's
        # session: made with the gRPC server (enableGrpc)
        self.grpc_clients: GrpcClients | None = None
        self.grpc_push: PushConsumers | None = None  # push consumers' renewals (enableGrpc)
        self.ops_service = OpsService(
            stats=self.stats, offsets=self.consumer_offset_manager,
            topics=self.topic_config_manager, consumers=self.consumer_manager,
            producers=self.producer_manager)
        self.ops_processor = OpsProcessor(self.ops_service, self.config_service)
        self.broker2client_service: Broker2ClientService[RemotingReply] = Broker2ClientService(
            broker_name=config.broker_name, role=self.role, topics=self.topic_config_manager,
            offsets=self.consumer_offset_manager, queues=self.message_store,
            consumers=self.consumer_manager, link=RemotingConsumerLink(),
            log=self.log.bind(service="broker2client"))
        self.broker2client = Broker2Client(self.broker2client_service)
        self.pull_service = PullService(
            config, self.role, self.subscription_group_manager, self.topic_config_manager,
            self.consumer_manager, self.consumer_filter_manager, self.message_store,
            self.consumer_offset_manager, self.stats,
            max_held=config.max_held_pulls,
            max_held_per_connection=config.max_held_pulls_per_connection,
        )
        self.pull_processor = PullMessageProcessor(self.pull_service)
        # POP (RocketMQ 5's SimpleConsumer): the in-flight log under <store>/pop; its
        # handles' secret and records are read at load (until then a throwaway secret)
        self.pop_log = PopLog(config.store_path("pop"))
        self.pop_service = PopService(
            config, self.role, self.subscription_group_manager, self.topic_config_manager,
            self.message_store, self.consumer_offset_manager,
            PopTable(config.pop_inflight_message_threshold, config.pop_inflight_total_threshold),
            HandleCodec(secrets.token_bytes(32), config.broker_name),
            send_back_reviver(self.send_service.send_back,
                              lambda off: self.message_store.look_message_by_offset(off)
                              is not None),
            self.consumer_filter_manager,
            send_back_reviver(self.send_service.send_back,
                              lambda off: self.message_store.look_message_by_offset(off)
                              is not None, dead_letter=True))
        self.pop_runner = PopRunner(self.pop_service, self.pop_log,
                                    checkpoint_bytes=config.pop_log_checkpoint_bytes,
                                    revive_interval_ms=config.revive_interval,
                                    sync_flush=config.flush_disk_type is FlushDiskType.SYNC_FLUSH,
                                    flush_interval_ms=config.flush_interval_commit_log)
        self.pop_processor = PopMessageProcessor(
            self.pop_service, self.pop_runner, max_polling=config.max_pop_polling_size,
            max_suspend_ms=lambda: config.long_polling_max_suspend_millis)
        self.query_service = QueryService(
            config.broker_name, self.role, self.message_store, self.topic_config_manager,
            self.consumer_manager, self.consumer_offset_manager, self.subscription_group_manager)
        self.query_processor = QueryMessageProcessor(self.query_service, lambda: self.acl_check)
        self.queue_admin_processor = QueueAdminProcessor(self.query_service)
        # topics and subscription groups: each journal's writer (group commit; an
        # admin's change is answered once its writer has it on disk)
        self._topics_guard = Guard(self.log, "persist topics")
        self.topic_writer = JournalWriter(self.topic_config_manager, self._topics_guard,
                                          TOPIC_DURABLE_TIMEOUT_S,
                                          "topic changes not journaled in time")
        self.group_writer = JournalWriter(self.subscription_group_manager,
                                          Guard(self.log, "persist subscription groups"),
                                          TOPIC_DURABLE_TIMEOUT_S,
                                          "subscription group changes not journaled in time")
        self.admin_service = AdminService(
            config, self.role,
            AdminTables(self.topic_config_manager, self.topic_writer,
                        self.subscription_group_manager, self.group_writer,
                        self.consumer_offset_manager,
                        lambda: self.schedule_service.offset_table),
            self.message_store, self.consumer_manager, self.stats, self._runtime_sources(),
            on_topics_changed=self.trigger_register, delete_topic_data=self.delete_topic)
        self.admin_processor = AdminBrokerProcessor(self.admin_service)
        self.pull_hold_service = self.pull_service.holds  # long polling
        self.message_store.dispatch_listeners.append(
            self.pull_hold_service.notify_message_arriving
        )
        self.message_store.dispatch_listeners.append(self.pop_runner.notify_message_arriving)
        # plain ACL (aclEnable): the served handlers check each request; the
        # broker's own clients (name servers, HA) are not affected
        self.acl_file: AclFile | None = None
        handlers = self._handler_table()
        if config.acl_enable:
            self.acl_file = AclFile(self.acl_path())
        AclAdminProcessor(self.acl_file, config.broker_name, config.broker_cluster_name,
                          lambda: config.broker_addr).register(handlers)
        # what handlers find beyond the header (a stored message's topic, a body's
        # group) is checked by them through acl_check (broker/acl/stored.py)
        self.acl_check = ResourceCheck()
        # ... and a connection not yet authenticated is judged on each header
        # before the body is read, within small limits (protocol/trio/preauth.py)
        preauth: PreAuth | None = None
        if self.acl_file is not None:
            acl_file = self.acl_file
            handlers = guard_table(handlers, lambda: acl_file.config,
                                   self.stats.record_acl_refusal,
                                   binding=signature_binding(config))
            self.acl_check = ResourceCheck(lambda: acl_file.config,
                                           self.stats.record_acl_refusal)
            preauth = pre_auth_of(config, HeaderGate(lambda: acl_file.config,
                                                     self.stats.record_acl_refusal),
                                  config.max_message_size)
        self.server = RemotingServer(
            handlers, self.listen_host,
            config.listen_port, max_frame_size=config.max_frame_size,
            limits=config.connection_limits(),
            budget=SharedBudget(config.max_total_connection_buffer_bytes),
            lanes=request_lanes(config), tls=config.server_tls(),
            busy_poll=self.busy_poll, preauth=preauth,
        )
        self.server.on_connection_closed(self._on_connection_closed)
        self.server.on_connection_closed(self.pull_hold_service.connection_closed)
        self.outer_api: BrokerOuterAPI | None = None
        # The port the HA service listens on, set by it once bound (and then it
        # triggers a registration); until then no HA address is advertised.
        self.ha_listen_port: int | None = None
        self._ephemeral_ha = False  # set by run(): an ephemeral listen port, an ephemeral HA port
        if self.acl_file is not None:  # a slave's HA hello: signed by an admin account
            self.ha_service.acl_config = lambda: acl_file.config
        # a slave copies its master's tables only while the master's log continues its own
        self.slave_synchronize = SlaveSynchronize(
            self, self._master_addr, master_trusted=lambda: self.ha_service.master_accepted)
        # new commit-log data wakes the writers to the slaves (only a master puts)
        self.message_store.append_listeners.append(self.ha_service.notify_new_data)
        self.ha_service.on_recovered = self._copy_tables_from_slave
        self.ha_service.on_discarded = self._discarded_log
        self.ha_service.on_slave_heard = self._offsets_from_slave
        self.metrics_port: int | None = None  # once served
        self.metrics_server: MetricsServer | None = None
        if config.metrics_port > 0:
            # a scrape copies on the loop, renders in a worker thread (broker/metrics.py)
            self.metrics_server = MetricsServer(
                broker_registry(self), self.listen_host, config.metrics_port,
                snapshot=partial(frozen_registry, BrokerCollector(self)))
        self.grpc_server: GrpcServer | None = None
        if config.enable_grpc:
            self.grpc_server = self._grpc_server()
        self.tune_gc = False  # mqbroker sets it: freeze start-up objects, fewer young GCs
        self._stop = trio.Event()
        self.started = False
        self._register_guard = Guard(self.log, "register")
        # one registration loop per name server: each its own wake-up and back-off
        self._register_events = {a: trio.Event() for a in config.namesrv_addr_list}
        self._register_guards = {a: Guard(self.log.bind(namesrv=a), "register")
                                 for a in config.namesrv_addr_list}
        # controller mode: short retries until a registration settles the role
        self._register_retries = {a: RegisterRetry() for a in config.namesrv_addr_list}
        self._persist_guard = Guard(self.log, "persist")

    def _runtime_sources(self) -> RuntimeSources:
        """What GET_BROKER_RUNTIME_INFO reads beyond the tables, read when asked."""
        return RuntimeSources(
            boot_timestamp_ms=lambda: self.boot_timestamp_ms,
            start_accept_send_timestamp_ms=lambda: self.start_accept_send_timestamp_ms,
            commit_log_disk_ratio=self.commit_log_disk_ratio,
            held_pulls=lambda: self.pull_hold_service.index.total,
            connections=lambda: self.server.connections,
            notifications_dropped=lambda: self.client_service.notifications_dropped,
            ha_listen_port=lambda: self.ha_listen_port,
            ha_status=self.ha_service.status,
            schedule_stats=self.schedule_service.running_stats,
            transaction_status=self.transaction_service.status,
            slave_sync_status=lambda: self.slave_synchronize.status(),
            timer_status=self.timer_service.status,
        )

    def _handler_table(self) -> HandlerTable:
        t = HandlerTable()
        t.register(RequestCode.SEND_MESSAGE, self.send_processor.send)
        t.register(RequestCode.SEND_MESSAGE_V2, self.send_processor.send)
        t.register(RequestCode.SEND_BATCH_MESSAGE, self.send_processor.send)
        t.register(RequestCode.CONSUMER_SEND_MSG_BACK, self.send_processor.consumer_send_msg_back)
        t.register(RequestCode.END_TRANSACTION, self.end_transaction_processor.end_transaction)
        timer = RecallMessageProcessor(self.timer_service)
        t.register(RequestCode.RECALL_MESSAGE, timer.recall_message)
        t.register(RequestCode.GET_TIMER_CHECK_POINT, timer.get_timer_check_point)
        t.register(RequestCode.PULL_MESSAGE, self.pull_processor.pull_message)
        t.register(RequestCode.POP_MESSAGE, self.pop_processor.pop_message)
        t.register(RequestCode.ACK_MESSAGE, self.pop_processor.ack_message)
        t.register(RequestCode.BATCH_ACK_MESSAGE, self.pop_processor.batch_ack_message)
        t.register(RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
                   self.pop_processor.change_invisible_time)
        cm = self.consumer_manage_processor
        t.register(RequestCode.QUERY_CONSUMER_OFFSET, cm.query_consumer_offset)
        t.register(RequestCode.UPDATE_CONSUMER_OFFSET, cm.update_consumer_offset)
        t.register(RequestCode.GET_MAX_OFFSET, cm.get_max_offset)
        t.register(RequestCode.GET_MIN_OFFSET, cm.get_min_offset)
        ad = self.admin_processor
        t.register(RequestCode.UPDATE_AND_CREATE_TOPIC, ad.update_and_create_topic)
        t.register(RequestCode.DELETE_TOPIC_IN_BROKER, ad.delete_topic)
        t.register(RequestCode.GET_TOPIC_STATS_INFO, ad.get_topic_stats_info)
        t.register(RequestCode.GET_ALL_TOPIC_CONFIG, ad.get_all_topic_config)
        t.register(RequestCode.GET_ALL_CONSUMER_OFFSET, ad.get_all_consumer_offset)
        t.register(RequestCode.GET_BROKER_RUNTIME_INFO, ad.get_broker_runtime_info)
        t.register(RequestCode.GET_ALL_DELAY_OFFSET, ad.get_all_delay_offset)
        t.register(RequestCode.GET_CONSUME_STATS, ad.get_consume_stats)
        t.register(RequestCode.GET_CONSUMER_CONNECTION_LIST, ad.get_consumer_connection_list)
        t.register(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, ad.update_and_create_subscription_group)
        t.register(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, ad.get_all_subscription_group)
        t.register(RequestCode.DELETE_SUBSCRIPTIONGROUP, ad.delete_subscription_group)
        cmp = self.client_manage_processor
        t.register(RequestCode.HEART_BEAT, cmp.heart_beat)
        t.register(RequestCode.UNREGISTER_CLIENT, cmp.unregister_client)
        t.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, cmp.get_consumer_list_by_group)
        t.register(RequestCode.CHECK_CLIENT_CONFIG, cmp.check_client_config)
        t.register(RequestCode.LOCK_BATCH_MQ, cmp.lock_batch_mq)
        t.register(RequestCode.UNLOCK_BATCH_MQ, cmp.unlock_batch_mq)
        qp = self.query_processor
        t.register(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, qp.search_offset_by_timestamp)
        t.register(RequestCode.VIEW_MESSAGE_BY_ID, qp.view_message_by_id)
        t.register(RequestCode.QUERY_MESSAGE, qp.query_message)
        ops = self.ops_processor
        t.register(RequestCode.VIEW_BROKER_STATS_DATA, ops.view_broker_stats_data)
        t.register(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, ops.query_topic_consume_by_who)
        t.register(RequestCode.GET_PRODUCER_CONNECTION_LIST, ops.get_producer_connection_list)
        t.register(RequestCode.GET_BROKER_CONFIG, ops.get_broker_config)
        t.register(RequestCode.UPDATE_BROKER_CONFIG, ops.update_broker_config)
        qa = self.queue_admin_processor
        t.register(RequestCode.GET_TOPIC_CONFIG, qa.get_topic_config)
        t.register(RequestCode.QUERY_CONSUME_QUEUE, qa.query_consume_queue)
        t.register(RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE, qa.clean_expired_consume_queue)
        t.register(RequestCode.CLEAN_UNUSED_TOPIC, qa.clean_unused_topic)
        b2c = self.broker2client
        t.register(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, b2c.reset_offset)
        t.register(RequestCode.GET_CONSUMER_RUNNING_INFO, b2c.get_consumer_running_info)
        t.register(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, self.notify_broker_role_changed)
        t.register(RequestCode.GET_BROKER_EPOCH_CACHE, self.get_broker_epoch_cache)
        return t

    # ---- controller mode (broker/replicas_manager.py) ---------------------------------

    def notify_broker_role_changed(self, conn: RemotingConnection, cmd: RemotingCommand
                                   ) -> RemotingCommand:
        """NOTIFY_BROKER_ROLE_CHANGED from a controller: checked, then the broker
        asks the controller at once (it acts on the controller's answer, never on
        the notification's content); an older masterEpoch is ignored."""
        header = NotifyBrokerRoleChangedRequestHeader.from_fields(cmd.ext_fields)
        if self.replicas is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                "this broker is not in controller mode (enableControllerMode, "
                                "controllerAddr)")
        if not self.replicas.notified(header):
            return cmd.response(ResponseCode.SUCCESS, "stale: masterEpoch older than the "
                                                      "role in force, ignored")
        return cmd.response(ResponseCode.SUCCESS)

    def epoch_cache(self) -> EpochEntryCache:
        """This broker's epoch history as GET_BROKER_EPOCH_CACHE answers it (an
        entry's end: the next one's start; the last one's: the log's end)."""
        store = self.message_store
        entries = store.epochs.entries
        end = store.get_max_phy_offset()
        out = [EpochEntry(e.epoch, e.start, entries[i + 1].start if i + 1 < len(entries) else end)
               for i, e in enumerate(entries)]
        broker_id = self.config.broker_id
        if self.replicas is not None and self.replicas.core.broker_id is not None:
            broker_id = self.replicas.core.broker_id
        return EpochEntryCache(self.config.broker_cluster_name, self.config.broker_name,
                               broker_id, tuple(out), end)

    def get_broker_epoch_cache(self, conn: RemotingConnection, cmd: RemotingCommand
                               ) -> RemotingCommand:
        response = cmd.response(ResponseCode.SUCCESS)
        response.body = cmd.encode_body(self.epoch_cache().to_dict())
        return response

    def _replica_hooks(self) -> ReplicaHooks:
        store = self.message_store
        return ReplicaHooks(
            broker_addr=lambda: self.config.broker_addr,
            max_offset=store.get_max_phy_offset,
            confirm_offset=lambda: (self.ha_service.confirm_offset()
                                    if self.ha_service.master_role and not self.role.is_slave
                                    else store.dispatch_limit or 0),
            epoch=lambda: store.epochs.last_epoch,
            become_master=self._become_master,
            become_slave=self._become_slave,
            set_sync_state=self._set_sync_state)

    def _set_sync_state(self, master_id: int, members: frozenset[int], epoch: int) -> None:
        try:
            self.ha_service.set_sync_state_set(HASyncStateSet(master_id, members, epoch))
        except SyncStateError as exc:
            self.log.info("SyncStateSet from the controller not taken", error=str(exc))

    async def _become_master(self, view: ControllerView) -> None:
        """The controller elected this broker: master (brokerId 0 with the name
        servers) with a new write epoch above masterEpoch - 1 and its SyncStateSet."""
        assert view.master_id is not None
        self.ha_service.epoch_floor = max(0, view.master_epoch - 1)
        self._registration_epochs(view)
        members = view.sync_state_set or frozenset({view.master_id})
        self._next_sync_state = HASyncStateSet(view.master_id, members,
                                               view.sync_state_set_epoch)
        role = self.role.next(self.controller_master_role, 0)
        if not self.role_runner.running:
            await self._first_role(role or self.role.current)
        else:
            await self.change_role(self.controller_master_role, 0)
        pending, self._next_sync_state = self._next_sync_state, None
        if pending is not None:  # the role did not change: the set still goes in
            self._set_sync_state(pending.master_id, pending.members, pending.epoch)

    async def _become_slave(self, view: ControllerView) -> None:
        """Follow the master the controller names (its HA address: the name
        servers' answer for that very master)."""
        assert self.replicas is not None and self.replicas.core.broker_id is not None
        broker_id = self.replicas.core.broker_id
        self._registration_epochs(view)
        role = self.role.next(BrokerRole.SLAVE, broker_id, view.master_address)
        if not self.role_runner.running:
            await self._first_role(role or self.role.current)
        else:
            await self.change_role(BrokerRole.SLAVE, broker_id, view.master_address)

    def _registration_epochs(self, view: ControllerView) -> None:
        """Registrations from now on carry the epochs of the role ``view`` gives:
        the name servers keep, of two brokerId 0 registrations, the newer master."""
        if self.outer_api is not None:
            self.outer_api.master_epoch = view.master_epoch
            self.outer_api.sync_state_set_epoch = view.sync_state_set_epoch

    async def _first_role(self, role: Role) -> None:
        """Controller mode: the first role the controller gave; the role's
        services and the registrations with the name servers start now."""
        assert self._serving is not None
        if role != self.role.current:
            self.role.apply(role)
        if not role.is_slave and self._loaded_as_slave:
            await trio.to_thread.run_sync(self.transaction_service.load)
        self.ha_service.take_role(role.is_slave, role.master_ha_addr)
        if role.is_slave:
            self.message_store.write_fence = SLAVE_FENCE
        else:
            self._take_next_sync_state()
        await self._serving.start(self.role_runner.run)
        self._serving.start_soon(self._register_loop)
        self.log.info("role from the controller", **role.describe())

    def _take_next_sync_state(self) -> None:
        pending, self._next_sync_state = self._next_sync_state, None
        if pending is not None:
            self._set_sync_state(pending.master_id, pending.members, pending.epoch)

    async def _no_slaves_to_wait_for(self) -> set[int]:
        """Controller mode: the master the controller elected holds what was
        acknowledged; replicas with more truncate. Nothing to wait for."""
        return set()

    def acl_path(self) -> Path:
        """aclPlainFile, or plain_acl.yml beside the config file (else in the store root)."""
        if self.config.acl_plain_file:
            return Path(self.config.acl_plain_file)
        if self.config_file is not None:
            return self.config_file.parent / "plain_acl.yml"
        return Path(self.config.store_path_root_dir) / "plain_acl.yml"

    @property
    def listen_host(self) -> str:
        """The address the broker's listeners bind (its remoting port, metricsPort)."""
        return self.config.listen_host

    def timed_flush_commit_log(self, prepare: bool = True) -> Any:
        """Flush the commit log (a worker thread); its time goes to flush_latency.
        ``prepare``: then create the next file when due, a time not counted
        (the group commit has its own thread for that)."""
        started = time.perf_counter()
        try:
            offset = self.message_store.flush_commit_log(prepare=False)
        finally:
            self.flush_latency.observe(time.perf_counter() - started)
        if prepare:
            self.message_store.prepare_next_commit_log_file()
        return offset

    async def apply_runtime_config(self, changes: dict[str, str]) -> None:
        """Runtime-key changes, checked, written and applied (ConfigService.update:
        ConfigError or OSError, nothing applied)."""
        await self.config_service.update(changes)

    def _config_applied(self, changes: dict[str, str]) -> None:
        """A runtime change is in the live config: the store gets its new
        StoreConfig; a brokerPermission change registers with the name servers
        again."""
        self.message_store.reconfigure(StoreConfig.from_broker(self.config))
        if "brokerPermission" in changes:
            # every name server gets the whole table again, with the new permission
            self._register_whole_table()
            self.trigger_register()

    def commit_log_disk_ratio(self) -> float:
        """Used share (0..1) of the disk the commit log is on; 0 when unreadable."""
        store = self.message_store
        try:
            return float(store.disk_usage(store.commit_log.mapped_file_queue.store_dir))
        except OSError:
            return 0.0

    # ---- the role (broker/role.py) ---------------------------------------------------

    async def change_role(self, broker_role: BrokerRole, broker_id: int,
                          master_addr: str | None = None, master_ha_addr: str | None = None,
                          epoch: int | None = None) -> Role:
        """Move the running broker to another role (a slave: following the
        master at ``master_addr`` (remoting) and ``master_ha_addr`` (HA);
        either None: the name servers' answer, or haMasterAddress). Returns
        once the new role's services run (a new master: once it takes
        writes, or knows why it may not). RoleError for a role a broker
        cannot have; asking for the current role changes nothing."""
        return await self.role_runner.change(broker_role, broker_id, master_addr,
                                             master_ha_addr, epoch)

    def _master_addr(self) -> str | None:
        """A slave's master's remoting address: its role's, else the name servers'."""
        if self.role.current.master_addr is not None:
            return self.role.current.master_addr
        return self.outer_api.master_addr if self.outer_api is not None else None

    def _role_to_config(self, old: Role, new: Role) -> None:
        """The config follows the live role (what registrations, HA hellos and
        GET_BROKER_CONFIG read)."""
        self.config.broker_role = new.broker_role
        self.config.broker_id = new.broker_id
        # a master counts commits moving an offset back; a slave copies its master's
        self.consumer_offset_manager.count_rewinds = not new.is_slave

    def _register_whole_table(self) -> None:
        """The next registration sends every name server the whole topic table."""
        self.topic_config_manager.next_data_version()
        if self.outer_api is not None:
            self.outer_api.views.clear()

    async def _start_role_services(self, role: Role, nursery: trio.Nursery) -> None:
        """The services of ``role`` in its task group, then a registration with
        every name server; a master then waits until it may take writes
        (``start_writes``) before its schedule and transaction services run."""
        assert self.outer_api is not None
        if role.is_slave:
            await nursery.start(self.ha_service.run_slave)
            await nursery.start(self.slave_synchronize.run, self.outer_api.client)
            await self._register_for_role()
            return
        self.ha_listen_port = await nursery.start(
            self.ha_service.run_master, 0 if self._ephemeral_ha else None)
        await self._register_for_role()
        await self.ha_service.start_writes(self._no_slaves_to_wait_for
                                           if self.replicas is not None
                                           else self.listed_slaves)
        await nursery.start(self.schedule_service.run)
        if self.config.timer_wheel_enable:
            await nursery.start(self.timer_service.run)
        await nursery.start(self.transaction_service.run, self.ask_producer)

    async def _register_for_role(self) -> None:
        """Register now; after a change (not at start: the loops start after
        this), the registration loops wake too: their period depends on the
        role (a slave without a master asks every SLAVE_FIND_MASTER_S)."""
        for retry in self._register_retries.values():
            retry.restart()
        await self.register_broker_all()
        if self.started:
            self.trigger_register()

    async def _prepare_role(self, old: Role, new: Role) -> None:
        """Before the old role's services stop: a master becoming a slave takes
        no more puts, lets its slaves take what it stored (bounded) and
        answers the sends waiting for a slave."""
        if new.is_slave and not old.is_slave:
            waiting = await self.ha_service.stand_down(SLAVE_FENCE)
            if waiting:
                self.log.warning("sends waiting for a slave answered SLAVE_NOT_AVAILABLE: "
                                 "the broker becomes a slave", sends=waiting)

    async def _role_handed_over(self, old: Role, new: Role) -> None:
        """The old role's services ended (or still run: the same ones serve the
        new role): what the new one starts from."""
        if services_key(old) == services_key(new):
            return  # ASYNC_MASTER <-> SYNC_MASTER: the same services go on
        self.ha_listen_port = None  # nothing listens on it any more
        if new.is_slave:
            self.message_store.write_fence = SLAVE_FENCE
        elif old.is_slave:  # what a master ends: its transactions, from the log
            await trio.to_thread.run_sync(self.transaction_service.load)
        self.ha_service.take_role(new.is_slave, new.master_ha_addr)
        if not new.is_slave:
            self._take_next_sync_state()
        if self.outer_api is not None:  # the previous master's answers no longer hold
            self.outer_api.master_addr = self.outer_api.master_ha_addr = None
        self._register_whole_table()

    # ---- actions used by processors ---------------------------------------------

    def trigger_register(self) -> None:
        """Register with the name servers soon (topics changed)."""
        for event in self._register_events.values():
            event.set()

    def delete_topic(self, topic: str) -> None:
        self.topic_config_manager.delete(topic)
        self.consumer_offset_manager.remove_topic(topic)
        self.stats.drop_topic(topic)
        self.message_store.delete_topics({topic})
        self.trigger_register()

    def persisted_tables(self) -> list[SnapshotTable]:
        """The tables the persist loop writes every flushConsumerOffsetInterval ms
        (topics and subscription groups have their journal writers)."""
        return [self.consumer_offset_manager]

    async def persist_configs(self) -> None:
        """Snapshot each persisted table on the event loop, write it in a worker
        thread. A failed write is logged and retried next period."""
        for table in self.persisted_tables():
            await self._persist_guard.run(self._persist_table, table,
                                          path=str(getattr(table, "path", "")))

    @staticmethod
    async def _persist_table(table: SnapshotTable) -> None:
        snap = table.snapshot()
        if snap is None:
            return
        try:
            await trio.to_thread.run_sync(snap.write)
        except BaseException:
            table.dirty = True  # not on disk: the next period writes it again
            raise

    def request_shutdown(self) -> None:
        self._stop.set()

    # ---- lifecycle ---------------------------------------------------------------

    def _load(self) -> None:
        self.topic_config_manager.load()
        self.consumer_offset_manager.load()
        self.subscription_group_manager.load()
        self.schedule_service.load()
        if not self.message_store.load():
            raise RuntimeError("message store failed to load")
        self.message_store.start()
        self.timer_service.load()
        if not self.role.is_slave:
            self.transaction_service.load()
        self.pop_service.codec = HandleCodec(self.pop_log.secret(), self.config.broker_name)
        self.pop_service.recover(self.pop_log.load())

    def _shutdown_snapshots(self) -> list[ConfigSnapshot]:
        """On the event loop, once nothing serves any more: every table, as it is."""
        snaps = [
            self.consumer_offset_manager.snapshot(force=True),
            self.subscription_group_manager.snapshot(force=True),
            self.topic_config_manager.snapshot(),
        ]
        return [s for s in snaps if s is not None]

    def _persist_and_close(self, snapshots: list[ConfigSnapshot] | None = None) -> None:
        """Worker thread, at shutdown: write the snapshots (taken now when none
        are given: the caller owns the tables), close the store."""
        if snapshots is None:
            snapshots = self._shutdown_snapshots()
        try:
            for snap in snapshots:
                try:
                    snap.write()
                except Exception as exc:
                    self._persist_guard.failed(exc, "config not saved at shutdown",
                                               path=str(snap.path))
        finally:
            self.pop_log.close()
            self.timer_service.close()
            self.message_store.shutdown()

    @property
    def ha_server_addr(self) -> str | None:
        """The HA address to advertise: only once something listens on it."""
        if self.ha_listen_port is None:
            return None
        return f"{self.config.broker_ip1}:{self.ha_listen_port}"

    def note_config(self) -> None:
        """One notice per RocketMQ key given that has no effect here, and what the
        runtime overlay applied over the config file."""
        if self.loaded.overlay:
            self.log.info("runtime config changes applied",
                          path=str(self.loaded.overlay_path), **self.loaded.overlay)
        for key, value, reason in self.config.no_effect_notices():
            self.log.info("config key accepted, no effect here", key=key, value=value,
                          reason=reason)

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until ``request_shutdown``; reports the bound port when ready."""
        self.note_config()
        if self.acl_file is not None:
            await trio.to_thread.run_sync(self.acl_file.load_at_start)
        await trio.to_thread.run_sync(self._load)
        # What start-up loaded (modules, tables: 100,000 topic configs) lives as
        # long as the process: out of the cycle collector's full collections,
        # which would walk it all while requests wait. Young collections run
        # every YOUNG_GC_THRESHOLD allocations, not 700: a batch of 32 sends
        # allocates a few hundred containers, freed by reference counting.
        # (mqbroker only: tests run brokers inside their own process.)
        if self.tune_gc:
            gc.freeze()
            gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])
        try:
            async with RemotingClient(tls=self.config.client_tls(),
                                      credentials=self.config.broker_credentials()) as client:
                self.outer_api = BrokerOuterAPI(self.config, client)
                async with trio.open_nursery() as nursery:
                    # an ephemeral listen port (tests) gets an ephemeral HA port too:
                    # the bound port + 1 may be anyone's
                    self._ephemeral_ha = (self.config.listen_port == 0
                                          and self.config.ha_listen_port == 0)
                    controlled = (self.config.enable_controller_mode
                                  and bool(self.config.controller_addr_list))
                    if controlled:  # fenced until the controller gives a role
                        self.message_store.write_fence = CONTROLLER_FENCE
                    elif self.role.is_slave:
                        self.message_store.write_fence = SLAVE_FENCE
                    else:  # no writes before the slaves are heard
                        self.ha_service.fence_for_start()
                    port = await nursery.start(self.server.serve)
                    self.config.listen_port = port
                    self._store_host_is_broker_addr()
                    if self.grpc_server is not None:
                        # bound before the first registration, which carries its port
                        self.outer_api.grpc_port = await nursery.start(self.grpc_server.run)
                        assert self.grpc_push is not None
                        await nursery.start(self.grpc_push.run)
                    self._serving = nursery
                    if controlled:
                        # the role's services and the registrations start once the
                        # controller has said the role (_first_role)
                        self.replicas = ReplicasManager(self.config, client,
                                                        self._replica_hooks(),
                                                        log=self.log.bind(service="replicas"))
                        self.ha_service.on_sync_state_proposal = self.replicas.propose
                        # never holding the start up: a controller down is retried
                        nursery.start_soon(self.replicas.run)
                    else:
                        # the role's services; they register with the name servers
                        await nursery.start(self.role_runner.run)
                        nursery.start_soon(self._register_loop)
                    if self.acl_file is not None:
                        nursery.start_soon(self.acl_file.watch,
                                           self.config.acl_reload_interval / 1000)
                    if self.group_commit is not None:
                        await nursery.start(self.group_commit.run)
                    else:
                        nursery.start_soon(self._flush_loop, "flush commit log",
                                           self.timed_flush_commit_log,
                                           self.config.flush_interval_commit_log)
                        if self.config.write_behind_interval_commit_log > 0:
                            nursery.start_soon(self._write_behind_loop)
                    if self.message_store.index_service is not None:
                        nursery.start_soon(self._index_ahead_loop, self.message_store.index_service)
                    nursery.start_soon(self._flush_loop, "flush consume queues",
                                       self.message_store.flush_consume_queues,
                                       self.config.flush_interval_consume_queue)
                    nursery.start_soon(self._persist_loop)
                    nursery.start_soon(self._topic_persist_loop)
                    nursery.start_soon(self.group_writer.run)
                    nursery.start_soon(self._clean_loop)
                    nursery.start_soon(self._housekeeping_loop)
                    nursery.start_soon(self._trim_loop)
                    nursery.start_soon(self._stats_loop)
                    if self.metrics_server is not None:
                        self.metrics_port = await nursery.start(self.metrics_server.run)
                    await nursery.start(self.pull_hold_service.run)
                    await nursery.start(self.pop_runner.run)
                    self.started = True
                    self.start_accept_send_timestamp_ms = int(time.time() * 1000)
                    self.log.info("broker started", addr=self.config.broker_addr,
                                  namesrv=self.config.namesrv_addr, flush=self.config.flush_disk_type.value,
                                  role=("fenced: the controller gives it"
                                        if self.replicas is not None
                                        else self.config.broker_role.value),
                                  broker_id=self.config.broker_id)
                    task_status.started(port)
                    await self._stop.wait()
                    self.log.info("broker shutting down")
                    if self.metrics_server is not None:
                        self.metrics_server.stop()
                    if self.grpc_server is not None:
                        self.grpc_server.stop()
                    with trio.move_on_after(5):
                        try:
                            await self.outer_api.unregister_broker_all()
                        except Exception as exc:
                            self._register_guard.failed(exc, "unregister failed")
                    nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                # the serving nursery is gone: nothing mutates the tables any more
                snapshots = self._shutdown_snapshots()
                await trio.to_thread.run_sync(self._persist_and_close, snapshots)
            self.log.info("broker stopped")

    def _grpc_server(self) -> GrpcServer:
        """apache.rocketmq.v2.MessagingService over the broker's services (broker/grpc/);
        its endpoint is brokerIP1 and the port it is bound to."""
        require_grpc()
        from broker.grpc.clients import GrpcClients
        from broker.grpc.guard import GrpcGuard
        from broker.grpc.messaging import MessagingService
        from broker.grpc.server import GrpcApp, GrpcServer

        def endpoint() -> tuple[str, int]:
            assert self.grpc_server is not None
            return self.config.broker_ip1, self.grpc_server.port

        async def routes(topic: str) -> TopicRouteData | None:
            if self.outer_api is None:
                return None
            return await self.outer_api.topic_route(topic)

        self.grpc_clients = GrpcClients(self.client_service)
        groups = self.subscription_group_manager
        messaging = MessagingService(self.config, self.send_service, self.topic_config_manager,
                                     endpoint=endpoint, on_topics_changed=self.trigger_register,
                                     routes=routes, pop=self.pop_processor,
                                     clients=self.grpc_clients,
                                     recall=self.timer_service.recall_handle,
                                     groups=lambda name: groups.table.get(name),
                                     send_back=self.send_service.send_back,
                                     transactions=self.end_transaction_service)
        self.grpc_push = messaging.push
        acl_file = self.acl_file
        guard = GrpcGuard(None if acl_file is None else (lambda: acl_file.config),
                          window_ms=self.config.acl_grpc_date_time_window,
                          on_refusal=self.stats.record_acl_refusal)
        app = GrpcApp(guard.guard_methods(messaging.methods()),
                      max_message_bytes=self.config.grpc_max_inbound)
        return GrpcServer(app, self.listen_host, self.config.grpc_listen_port,
                          tls=self.config.server_tls())

    @property
    def grpc_port(self) -> int | None:
        """The gRPC port once bound (None: enableGrpc is off)."""
        return None if self.grpc_server is None else self.grpc_server.port

    def _store_host_is_broker_addr(self) -> None:
        """Records carry the address clients reach the broker at (their offset
        msgIds name it: RocketMQ's clients view a message by id there). A broker
        on an ephemeral port (tests) knows its port only once bound."""
        self.message_store.reconfigure(StoreConfig.from_broker(self.config))

    async def register_broker_all(self, addr: str | None = None) -> bool:
        """Register with every name server at once (or with ``addr`` only): the
        whole table with one that does not know this broker's topics yet, else
        only what changed since it last took a registration (broker/out_api.py).
        Never raises (but Cancelled): a failure is logged and the next period
        (or topic change) tries again. Returns whether it settled the role: every
        name server asked took it and, a slave of the master the controller chose,
        the answer named that master with its HA address (outside controller mode:
        always True)."""
        assert self.outer_api is not None
        guard = self._register_guard if addr is None else self._register_guards[addr]
        settled = False
        try:
            taken = await self.outer_api.register_broker_all(
                self.topic_config_manager, self.ha_server_addr,
                None if addr is None else [addr])
            asked = 1 if addr is not None else len(self.config.namesrv_addr_list)
            settled = taken >= asked
            if self.role.is_slave:
                # controller mode: only the HA address of the master the controller named
                wanted = self.role.current.master_addr
                named = self.outer_api.master_addr == wanted
                if wanted is None or named:
                    self.ha_service.set_master_ha_addr(self.outer_api.master_ha_addr)
                settled = settled and (wanted is None or
                                       (named and self.ha_service.master_ha_addr is not None))
        except Exception as exc:
            guard.failed(exc, "register with name servers failed",
                         topics=len(self.topic_config_manager.table))
        else:
            guard.ok()
        return settled or self.replicas is None

    async def _register_loop(self) -> None:
        """One loop per name server: one that hangs delays no other's registrations."""
        async with trio.open_nursery() as nursery:
            for addr in self.config.namesrv_addr_list:
                nursery.start_soon(self._register_one_loop, addr)

    async def _register_one_loop(self, addr: str) -> None:
        interval = self.config.register_broker_interval_ms / 1000
        while True:
            # a slave that does not know its master's HA address yet asks every
            # second: the master, starting, waits for its hello (ha_service)
            wait = interval
            if self.role.is_slave and self.ha_service.master_ha_addr is None:
                wait = min(interval, SLAVE_FIND_MASTER_S)
            retry = self._register_retries[addr].wait()  # controller mode, not settled
            if retry is not None:
                wait = min(wait, retry)
            with trio.move_on_after(wait):
                await self._register_events[addr].wait()
            self._register_events[addr] = trio.Event()
            settled = await self.register_broker_all(addr)
            self._register_retries[addr].settled(settled)
            # after failures, topic changes do not re-register back to back
            await self._register_guards[addr].pause()

    async def listed_slaves(self) -> set[int] | None:
        """The broker ids of this broker group's slaves registered with the name
        servers (empty without name servers; None when none answered)."""
        assert self.outer_api is not None
        addrs = self.config.namesrv_addr_list
        if not addrs:
            return set()
        api = self.outer_api
        answers: list[set[int]] = []

        async def ask(addr: str) -> None:  # all at once: a dead one delays no other
            try:
                answers.append(await api.broker_ids(addr, self.config.broker_name))
            except Exception as exc:
                self.log.info("name server did not list this group's slaves", namesrv=addr,
                              error=describe(exc))

        async with trio.open_nursery() as nursery:
            for addr in addrs:
                nursery.start_soon(ask, addr)
        if not answers:
            return None
        return {i for ids in answers for i in ids if i > 0}

    async def _copy_tables_from_slave(self, addr: str) -> None:
        """After this master restored its log from a slave: the slave's topics,
        groups and offsets too (merged: nothing here is lost)."""
        assert self.outer_api is not None
        await self.slave_synchronize.sync_all(self.outer_api.client, addr, from_slave=True)
        self.trigger_register()
        self.log.warning("topics, groups and offsets copied from the slave", slave=addr,
                         topics=len(self.topic_config_manager.table))

    async def _offsets_from_slave(self, addr: str) -> None:
        """A master starting: a slave's newer consumer offsets (committed to it
        while this master was down) before this master takes writes."""
        assert self.outer_api is not None
        moved = await self.slave_synchronize.offsets_from_slave(self.outer_api.client, addr)
        if moved:
            self.log.info("consumer offsets taken from the slave", slave=addr, keys=moved)

    async def _discarded_log(self) -> None:
        """haDiscardLog acts once: set back to false where it was set."""
        await self.apply_runtime_config({"haDiscardLog": "false"})

    def ask_producer(self, group: str, build: Callable[[], CheckRequest]) -> Asked:
        """Ask one live producer of ``group`` that reads what it is sent about a
        transaction (the request ``build`` makes): a remoting producer with
        CHECK_TRANSACTION_STATE, a gRPC producer with a
        RecoverOrphanedTransactionCommand on its open Telemetry stream
        (broker/grpc/transactions.py). BUSY (nothing sent) when every producer
        of the group that could be asked is owed more than the write high-water
        mark (gRPC: its stream's outbox is full): the check is asked again next
        pass instead of queueing without bound for a producer that reads
        nothing. With ACL, only a remoting producer whose heart-beat's account
        may PUB on the half message's topic is asked: joining a producer group
        takes no right, hearing its checks (the message's body) and answering
        them does; gRPC producers are then never asked (no account is verified
        over gRPC)."""
        members = [c for c in self.producer_manager.connections(group) if not c.closed]
        conns = [c for c in members if not isinstance(c, SessionChannel)]
        streams = []
        if self.grpc_clients is not None and not self.acl_check.enabled:
            streams = self.grpc_clients.outboxes(members)
        if not conns and not streams:
            return Asked.NO_PRODUCER
        ready = [c for c in conns if c.takes_requests]
        open_streams = [o for o in streams if o.has_room()]
        if not ready and not open_streams:
            return Asked.BUSY
        request = build()
        needs = [Need(request.topic or RMQ_SYS_TRANS_HALF_TOPIC, Perm.PUB)]

        def may(c: RemotingConnection) -> bool:
            return self.acl_check.connection_may(c, RequestCode.CHECK_TRANSACTION_STATE, needs)

        allowed = [c for c in ready if may(c)]
        if not allowed and not open_streams:
            return Asked.BUSY if streams or any(may(c) for c in conns) else Asked.NO_PRODUCER
        pick = random.randrange(len(allowed) + len(open_streams))
        if pick >= len(allowed):
            from broker.grpc.transactions import recover_command
            outbox = open_streams[pick - len(allowed)]
            return Asked.SENT if outbox.offer(recover_command(request)) else Asked.BUSY
        cmd = RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE,
                                      request.header.to_fields(), request.body, oneway=True)
        return Asked.SENT if allowed[pick].offer(cmd) else Asked.BUSY

    def _on_connection_closed(self, conn: RemotingConnection) -> None:
        self.client_service.channel_closed(conn)

    def housekeeping(self, now: float) -> None:
        """Drop producers and consumers silent for channelExpiredTimeout ms."""
        expired_after = self.config.channel_expired_timeout / 1000
        self.client_service.expire(now, expired_after)
        if self.grpc_clients is not None:
            self.grpc_clients.expire(now, expired_after)

    async def _housekeeping_loop(self) -> None:
        guard = Guard(self.log, "housekeeping")
        while True:
            await trio.sleep(HOUSEKEEPING_INTERVAL_S)
            await guard.run(self.housekeeping, trio.current_time())

    async def _stats_loop(self) -> None:
        """Snapshots of the operators' counters: the minute/hour/day windows."""
        guard = Guard(self.log, "stats snapshot")
        while True:
            await trio.sleep(TICK_INTERVAL_S)
            await guard.run(self.stats.tick, time.monotonic())

    async def _trim_loop(self) -> None:
        """Buffers a burst of clients made the broker hold go back to the system."""
        guard = Guard(self.log, "trim free memory")
        while True:
            await trio.sleep(HOUSEKEEPING_INTERVAL_S)
            await guard.run(trio.to_thread.run_sync, trim_free_memory)

    def clean(self) -> None:
        now = time.time()
        self.message_store.clean_expired_files(int(now * 1000), time.localtime(now).tm_hour)

    async def _clean_loop(self) -> None:
        # In the event loop, not a thread: files are closed here while pulls read them.
        guard = Guard(self.log, "clean expired files")
        while True:
            await trio.sleep(self.config.clean_resource_interval / 1000)
            await guard.run(self.clean)

    async def _write_behind_loop(self) -> None:
        """ASYNC_FLUSH: when puts wrote at least writeBehindCommitLogLeastPages
        pages of 4 KiB into the commit log within writeBehindIntervalCommitLog
        ms of one waking the loop, hand what the log holds past the last fsync
        and the last write-behind to the disk without waiting for it
        (DefaultMessageStore.write_behind, in a worker thread). The kernel's
        work of the next fsync then comes a little at a time: all of it in the
        fsync kept a CPU from the event loop and the clients for tens of ms
        every flushIntervalCommitLog. A slower stream of puts is left to the
        fsync (a write-behind then only adds disk writes for the sends to meet);
        idle, the loop waits for a put and never wakes."""
        store = self.message_store
        interval = self.config.write_behind_interval_commit_log / 1000
        least = self.config.write_behind_commit_log_least_pages * 4096
        guard = Guard(self.log, "write behind")
        write = partial(store.write_behind, 1)
        wake: list[trio.Event] = []

        def appended() -> None:
            if wake:
                wake.pop().set()

        store.append_listeners.append(appended)
        try:
            while True:
                grew = trio.Event()
                wake.append(grew)
                await grew.wait()
                mark = store.commit_log.max_offset
                await trio.sleep(interval)
                if store.commit_log.max_offset - mark >= max(least, 1):
                    await guard.run(trio.to_thread.run_sync, write)
        finally:
            store.append_listeners.remove(appended)

    async def _index_ahead_loop(self, index: IndexService) -> None:
        """Make the next index file in a worker thread as soon as a dispatch
        leaves the last one half full (IndexService.on_wants_next), so the
        dispatch on this loop never makes one itself (40-50 ms here) while
        files fill faster than the consume-queue flush comes round."""
        guard = Guard(self.log, "index file ahead")
        wake: list[trio.Event] = []

        def wants() -> None:
            if wake:
                wake.pop().set()

        index.on_wants_next = wants
        try:
            while True:
                wanted = trio.Event()
                wake.append(wanted)
                await wanted.wait()
                await guard.run(trio.to_thread.run_sync, index.prepare_next)
        finally:
            index.on_wants_next = None

    async def _flush_loop(self, name: str, flush: Any, interval_ms: int) -> None:
        guard = Guard(self.log, name)
        while True:
            await trio.sleep(interval_ms / 1000)
            with self.busy_poll.paused():  # the flush thread needs the CPU and the GIL
                await guard.run(trio.to_thread.run_sync, flush)

    async def _topic_persist_loop(self) -> None:
        """Journal topic changes (broker/journal_writer.py): every change waiting
        goes in one append and one fsync in a worker thread (group commit), a
        compaction rewrites topics.json when the journal has grown; admins
        waiting for a change are answered once it is on disk."""
        await self.topic_writer.run()

    async def _persist_loop(self) -> None:
        while True:
            await trio.sleep(self.config.flush_consumer_offset_interval / 1000)
            await self.persist_configs()
