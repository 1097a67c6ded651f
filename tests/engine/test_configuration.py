"""Configuration: typed options (Flink Agents 0.3.1's names and keys), both
spellings of a key, the ``agent:`` section of Flink's config.yaml, and
options taking effect on the local runner (on the Flink operator:
tests/e2e/test_configuration_e2e.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.configuration import ConfigOption, Configuration, ConfigurationView, ReadableConfiguration
from flink_agents.api.core_options import (
    AgentConfigOptions,
    AgentExecutionOptions,
    ErrorHandlingStrategy,
    EventLogLevel,
    LoggerType,
    RuntimeOptions,
    ShortTermMemoryTtlUpdate,
    all_options,
)
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.runtime.errors import ActionFailed


@pytest.fixture(autouse=True)
def _no_flink_conf_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLINK_CONF_DIR", raising=False)


# -- typed reads and writes ----------------------------------------------------------


def test_typed_reads_convert_text_and_name_the_key_on_bad_values() -> None:
    config = Configuration({"n": "42", "f": "2.5", "b": "False", "s": 7, "nested": {"flag": "yes"}})
    assert config.get_int("n") == 42
    assert config.get_float("f") == 2.5
    assert config.get_bool("b") is False  # 0.3.1's bool("False") would be True
    assert config.get_str("s") == "7"
    assert config.get_bool("nested.flag") is True  # nested mappings flatten to dotted keys
    assert config.get_int("missing", 5) == 5
    with pytest.raises(ValueError, match=r"configuration 'f': expected an integer, got '2.5'"):
        config.get_int("f")
    with pytest.raises(ValueError, match=r"configuration 's': expected a boolean, got 7"):
        config.get_bool("s")


def test_options_read_with_defaults_and_write_converted_values() -> None:
    config = Configuration()
    assert config.get(AgentExecutionOptions.MAX_RETRIES) == 3
    assert config.get(AgentExecutionOptions.ERROR_HANDLING_STRATEGY) is ErrorHandlingStrategy.FAIL
    assert config.get(AgentConfigOptions.EVENT_LOG_LEVEL) is EventLogLevel.STANDARD
    config.set(AgentExecutionOptions.ERROR_HANDLING_STRATEGY, ErrorHandlingStrategy.RETRY)
    config.set(AgentConfigOptions.EVENT_LOGGER_TYPE, "FILE")
    config.set(AgentConfigOptions.EVENT_LISTENERS, "pkg.mod:A; pkg.mod:B")
    assert config.get(AgentExecutionOptions.ERROR_HANDLING_STRATEGY) is ErrorHandlingStrategy.RETRY
    assert config.get(AgentConfigOptions.EVENT_LOGGER_TYPE) is LoggerType.FILE
    assert config.get(AgentConfigOptions.EVENT_LISTENERS) == ["pkg.mod:A", "pkg.mod:B"]
    # Enums are stored as their values: the configuration stays JSON-like.
    assert dict(config) == {
        "error-handling-strategy": "retry", "eventLoggerType": "file", "event-listeners": ["pkg.mod:A", "pkg.mod:B"],
    }
    with pytest.raises(ValueError, match=r"'max-retries': must be >= 0, got -1"):
        config.set(AgentExecutionOptions.MAX_RETRIES, -1)
    with pytest.raises(ValueError, match=r"'event-log.level': expected one of 'OFF', 'STANDARD', 'VERBOSE', got 'loud'"):
        config.set(AgentConfigOptions.EVENT_LOG_LEVEL, "loud")
    with pytest.raises(ValueError, match=r"configuration 'k': expected an integer, got '3'"):
        config.set_int("k", "3")
    config.set_float("ratio", 1)
    assert config["ratio"] == 1.0 and isinstance(config["ratio"], float)


def test_a_user_option_declared_with_0_3_1_signature_reads_typed() -> None:
    tenant_limit = ConfigOption("tenant.limit", int, 10)
    assert Configuration().get(tenant_limit) == 10
    assert Configuration({"tenant.limit": "25"}).get(tenant_limit) == 25
    assert tenant_limit.get_key() == "tenant.limit" and tenant_limit.get_type() is int


# -- two spellings -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ours", "theirs", "option", "expected"),
    [
        ({"job_id": "orders"}, {"job-identifier": "orders"}, AgentConfigOptions.JOB_IDENTIFIER, "orders"),
        ({"short_term_memory.ttl_s": 1.5}, {"short-term-memory.state-ttl.ms": 1500},
         AgentExecutionOptions.SHORT_TERM_MEMORY_STATE_TTL_MS, 1500),
        ({"error_strategy": "skip"}, {"error-handling-strategy": "ignore"},
         AgentExecutionOptions.ERROR_HANDLING_STRATEGY, ErrorHandlingStrategy.IGNORE),
        ({"error_strategy": "skip"}, {"error-handling-strategy": "IGNORE"}, RuntimeOptions.ERROR_STRATEGY, "skip"),
        ({"error_retry.max_attempts": 4}, {"max-retries": 3}, AgentExecutionOptions.MAX_RETRIES, 3),
        ({"error_retry.max_attempts": 4}, {"max-retries": "3"}, RuntimeOptions.ERROR_RETRY_MAX_ATTEMPTS, 4),
        ({"error_retry.initial_backoff_s": 2.0}, {"retry-wait-interval": 2},
         RuntimeOptions.ERROR_RETRY_INITIAL_BACKOFF_S, 2.0),
    ],
)
def test_both_spellings_give_the_same_option_value(ours: Dict, theirs: Dict, option: ConfigOption, expected: Any) -> None:
    assert Configuration(ours).get(option) == expected
    assert Configuration(theirs).get(option) == expected
    assert Configuration({**ours, **theirs}).get(option) == expected  # agreeing spellings are fine


def test_two_spellings_set_to_different_values_are_an_error_naming_both_keys() -> None:
    config = Configuration({"job_id": "a", "job-identifier": "b"})
    with pytest.raises(ValueError, match=r"'job-identifier' and 'job_id' are two spellings of one option"):
        config.get(AgentConfigOptions.JOB_IDENTIFIER)
    env = AgentsExecutionEnvironment.get_execution_environment(**{"max-retries": 1, "error_retry.max_attempts": 5})
    env.from_list([{"key": "k", "value": 1}]).apply(_retrying_agent(0))
    with pytest.raises(ValueError, match=r"'max-retries' and 'error_retry.max_attempts' are two spellings"):
        env.execute()


# -- config.yaml ----------------------------------------------------------------------


def _write_conf(directory: Path, text: str) -> Path:
    path = directory / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_agent_section_of_config_yaml_is_read_from_flink_conf_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_conf(tmp_path, """
taskmanager.numberOfTaskSlots: 2
agent:
  error-handling-strategy: retry
  max-retries: 5
  chat:
    async: false
  job-identifier: from-file
  tenant: acme
""")
    monkeypatch.setenv("FLINK_CONF_DIR", str(tmp_path))
    env = AgentsExecutionEnvironment.get_execution_environment(tenant="code")
    config = env.get_config()
    assert config.get(AgentExecutionOptions.ERROR_HANDLING_STRATEGY) is ErrorHandlingStrategy.RETRY
    assert config.get(AgentExecutionOptions.MAX_RETRIES) == 5
    assert config.get(AgentExecutionOptions.CHAT_ASYNC) is False  # nested YAML, dotted key
    assert "taskmanager.numberOfTaskSlots" not in config  # only the agent: section
    assert config["tenant"] == "code"  # code wins over the file
    # Code wins also when it uses the other spelling: no conflict with the file.
    config["job_id"] = "from-code"
    assert config.get(AgentConfigOptions.JOB_IDENTIFIER) == "from-code"
    assert "job-identifier" not in dict(config)
    # A value set from code before the file is loaded still wins.
    later = tmp_path / "later"
    later.mkdir()
    env.get_config(str(_write_conf(later, "agent:\n  max-retries: 9\n  tenant: later\n")))
    assert config.get(AgentExecutionOptions.MAX_RETRIES) == 9 and config["tenant"] == "code"


def test_a_bad_config_yaml_is_an_error_naming_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write_conf(tmp_path, "agent: [max-retries, 3]\n")
    monkeypatch.setenv("FLINK_CONF_DIR", str(tmp_path))
    with pytest.raises(ValueError, match=rf"{path}: 'agent' must be a mapping"):
        AgentsExecutionEnvironment.get_execution_environment()
    _write_conf(tmp_path, "agent:\n  max-retries: lots\n")
    env = AgentsExecutionEnvironment.get_execution_environment()
    with pytest.raises(ValueError, match=r"configuration 'max-retries': expected an integer, got 'lots'"):
        env.get_config().get(AgentExecutionOptions.MAX_RETRIES)


# -- options taking effect on the local runner ---------------------------------------------


ATTEMPTS: Dict[str, int] = {}


def _retrying_agent(failures: int) -> Agent:
    """Fails each record's first ``failures`` attempts, then outputs the attempt number."""

    def flaky(event: InputEvent, ctx: Any) -> None:
        ATTEMPTS[event.input] = ATTEMPTS.get(event.input, 0) + 1
        if ATTEMPTS[event.input] <= failures:
            raise RuntimeError(f"attempt {ATTEMPTS[event.input]} failed")
        ctx.send_event(OutputEvent(output=ATTEMPTS[event.input]))

    agent = Agent()
    agent.add_action("flaky", [InputEvent], flaky)
    return agent


def _run(agent: Agent, records: List[Dict[str, Any]], config: Dict[str, Any]) -> tuple[list, list]:
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.get_config().update(config)
    builder = env.from_list(records).apply(agent)
    outputs, errors = builder.to_list(), builder.to_error_list()
    env.execute()
    return outputs, errors


def test_0_3_1_retry_keys_retry_a_failing_action_on_the_local_runner() -> None:
    ATTEMPTS.clear()
    retry = {"error-handling-strategy": "retry", "max-retries": 2, "retry-wait-interval": 0}
    outputs, _ = _run(_retrying_agent(2), [{"key": "k", "value": "a"}], retry)
    assert outputs == [{"k": 3}]  # two retries after the first attempt
    ATTEMPTS.clear()
    with pytest.raises(ActionFailed, match="attempt 2 failed"):
        _run(_retrying_agent(2), [{"key": "k", "value": "b"}], {**retry, "max-retries": 1})
    ATTEMPTS.clear()
    outputs, errors = _run(_retrying_agent(1), [{"key": "k", "value": "c"}], {"error-handling-strategy": "ignore"})
    assert outputs == [] and [(e["key"], e["error_message"], e["attempts"]) for e in errors] == [
        ("k", "attempt 1 failed", 1)
    ]


def test_job_identifier_chooses_the_journal_a_run_replays(tmp_path: Path) -> None:
    calls: List[str] = []

    def effect(value: str) -> str:
        calls.append(value)
        return f"done {value}"

    def on_input(event: InputEvent, ctx: Any) -> None:
        ctx.send_event(OutputEvent(output=ctx.durable_execute(effect, event.input)))

    agent = Agent()
    agent.add_action("on_input", [InputEvent], on_input)
    store = {"journal.store": "sqlite", "journal.sqlite.path": str(tmp_path / "journal.db")}
    records = [{"key": "k", "value": "x"}]
    assert _run(agent, records, {**store, "job-identifier": "orders"})[0] == [{"k": "done x"}]
    # Same identifier (either spelling): the journaled result, no second call.
    assert _run(agent, records, {**store, "job_id": "orders"})[0] == [{"k": "done x"}]
    assert calls == ["x"]
    # Another identifier: another journal namespace, so the call runs again.
    assert _run(agent, records, {**store, "job-identifier": "invoices"})[0] == [{"k": "done x"}]
    assert calls == ["x", "x"]


def test_actions_read_the_configuration_typed_and_as_a_read_only_mapping() -> None:
    seen: List[Any] = []

    def on_input(event: InputEvent, ctx: Any) -> None:
        seen.append((
            ctx.config.get(AgentExecutionOptions.MAX_RETRIES),
            ctx.config.get(AgentExecutionOptions.ERROR_HANDLING_STRATEGY),
            ctx.config.get("tenant", "none"),
            ctx.config["tenant"],
            ctx.config.get_int("limit"),
            isinstance(ctx.config, ReadableConfiguration),
            hasattr(ctx.config, "set_str"),
        ))
        with pytest.raises(TypeError):
            ctx.config["tenant"] = "other"

    agent = Agent()
    agent.add_action("on_input", [InputEvent], on_input)
    _run(agent, [{"key": "k", "value": 1}], {"tenant": "acme", "limit": "7", "error_retry.max_attempts": 2})
    assert seen == [(1, ErrorHandlingStrategy.FAIL, "acme", "acme", 7, True, False)]


def test_a_bad_option_value_fails_the_job_at_start_naming_the_key() -> None:
    env = AgentsExecutionEnvironment.get_execution_environment(max_concurrent_runs="many")
    env.from_list([{"key": "k", "value": 1}]).apply(_retrying_agent(0))
    with pytest.raises(ValueError, match=r"configuration 'max_concurrent_runs': expected an integer, got 'many'"):
        env.execute()
    env = AgentsExecutionEnvironment.get_execution_environment(**{"journal.store": "mysql"})
    env.from_list([{"key": "k", "value": 1}]).apply(_retrying_agent(0))
    with pytest.raises(ValueError, match=r"'journal.store': must be one of 'sqlite', 'memory', 'postgres', got 'mysql'"):
        env.execute()


def test_num_async_threads_sizes_the_blocking_call_pool() -> None:
    from flink_agents.plan.agent_plan import AgentPlan
    from flink_agents.runtime.engine import AgentEngine

    plan = AgentPlan.from_agent(_retrying_agent(0))
    engine = AgentEngine(plan, {"num-async-threads": 3, "max_concurrent_runs": 8})
    default = AgentEngine(plan, {"max_concurrent_runs": 8})
    try:
        assert (engine.executors.call_threads, default.executors.call_threads) == (3, 8)
    finally:
        engine.close()
        default.close()


def test_short_term_memory_ttl_in_0_3_1_milliseconds_expires_memory_on_the_local_runner() -> None:
    from flink_agents.runtime.local.driver import LocalDriver

    config = Configuration({"short-term-memory.state-ttl.ms": 60_000})
    assert config.get(AgentExecutionOptions.SHORT_TERM_MEMORY_STATE_TTL_UPDATE_TYPE) is ShortTermMemoryTtlUpdate.ON_READ_AND_WRITE
    now = [0.0]
    driver = LocalDriver(memory_ttl_s=60.0, clock=lambda: now[0], memory_ttl_renewed_on_read=True)
    from flink_agents.runtime.execution.state import KeyState

    state = KeyState(journal_id="j")
    state.short_term_memory = {"n": 1}
    driver.store("k", state)
    for _ in range(3):  # a run reads n every 40 s: each read renews its TTL
        now[0] += 40
        loaded = driver.load("k")
        assert loaded.short_term_memory == {"n": 1}
        loaded.memory_reads = {"n"}  # what applying the run's completion leaves
        driver.store("k", loaded)
    now[0] += 61
    assert driver.load("k").short_term_memory == {}


def test_every_declared_option_has_a_documented_row() -> None:
    operations = (Path(__file__).parents[2] / "docs" / "operations.md").read_text(encoding="utf-8")
    missing = [option.key for _, _, option in all_options() if f"`{option.key}`" not in operations]
    assert missing == []
    assert all(option.description for _, _, option in all_options())


def test_configuration_view_is_a_mapping_that_pickles() -> None:
    import pickle

    view = ConfigurationView({"a": 1})
    assert pickle.loads(pickle.dumps(view)) == {"a": 1}
    assert Configuration({"a": 1}) == {"a": 1} and Configuration() == {}


def test_0_3_1_agent_configuration_import_path_loads_a_file(tmp_path: Path) -> None:
    from flink_agents.plan.configuration import AgentConfiguration

    config = AgentConfiguration({"kafkaActionStateTopicNumPartitions": 128})
    config.load_from_file(str(_write_conf(tmp_path, "agent:\n  chat:\n    async: false\n")))
    assert config.get_conf_data() == {"kafkaActionStateTopicNumPartitions": 128, "chat.async": False}
    assert config.get_config_data_by_prefix("chat") == {"async": False}
    assert config.get(AgentConfigOptions.KAFKA_ACTION_STATE_TOPIC_NUM_PARTITIONS) == 128
