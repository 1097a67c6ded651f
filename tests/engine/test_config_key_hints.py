"""A misspelt agent configuration key, or a misspelt key of a YAML agent
file, is named with the key it most likely meant.

Configuration keys warn (Flink Agents 0.3.1 keeps keys it does not know, and
a job's own code may read its own keys); YAML keys were already refused, and
the error now says what was meant.
"""

from __future__ import annotations

import warnings

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.core_options import MisspeltConfigKeyWarning, all_options, misspelt_keys
from flink_agents.api.decorators import action
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.yaml._source import YamlAgentError


class ErrorStrategyAgent(Agent):
    """Outputs the error strategy it sees and the job's own key."""

    @action(InputEvent)
    @staticmethod
    def report(event: InputEvent, ctx) -> None:
        ctx.send_event(OutputEvent(output={
            "strategy": ctx.config.get_str("error_strategy", "unset"),
            "typo": ctx.config.get_str("error_stratgy", "unset"),
        }))


def _run(configure) -> tuple[list, list]:
    env = AgentsExecutionEnvironment.get_execution_environment()
    configure(env.get_config())
    outputs = env.from_list([{"key": "k", "value": 1}]).apply(ErrorStrategyAgent()).to_list()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env.execute()
    return outputs, [w for w in caught if issubclass(w.category, MisspeltConfigKeyWarning)]


def test_a_misspelt_key_warns_with_the_option_meant_and_is_kept_as_0_3_1_does():
    outputs, caught = _run(lambda config: config.set_str("error_stratgy", "retry"))

    assert outputs == [{"k": {"strategy": "unset", "typo": "retry"}}]   # the typo did not set the option
    assert caught, "no warning named the misspelt key"
    message = str(caught[0].message)
    assert "'error_stratgy' is not an option; did you mean 'error_strategy'" in message


def test_a_misspelt_key_in_the_agent_section_of_a_config_file_warns(tmp_path):
    conf = tmp_path / "config.yaml"
    conf.write_text("agent:\n  rate_limit:\n    openai:\n      requests_per_minute: 60\n", encoding="utf-8")

    _, caught = _run(lambda config: config.load_from_file(conf))

    # (the environment and the engine both validate; Python shows one per process)
    assert {str(w.message).split(";")[0] for w in caught} == {
        "agent configuration key 'rate_limit.openai.requests_per_minute' is not an option"}
    assert "did you mean 'rate_limits.openai.requests_per_minute'?" in str(caught[0].message)


def test_declared_keys_and_the_jobs_own_keys_do_not_warn():
    _, caught = _run(lambda config: (config.set_str("error_strategy", "fail"), config.set_int("max-retries", 2),
                                     config.set_str("my_app.threshold", "0.7"), config.set_int("limit", 3),
                                     config.set_int("rate_limits.openai.requests_per_minute", 60)))
    assert caught == []


@pytest.mark.parametrize("key, meant", [
    ("error_stratgy", "error_strategy"),
    ("maxretries", "max-retries"),
    ("chat.asynch", "chat.async"),
    ("rate_limit", "rate_limits"),
    ("rate_limits.scop", "rate_limits.scope"),
    ("usage.price.gpt-4.1.input", "usage.prices.gpt-4.1.input"),
    ("long-term-memory.vector-stor", "long-term-memory.vector-store"),
    ("agent.max-retries", "max-retries"),  # the YAML section's prefix, given in code
    ("MAX-RETRIES", "max-retries"),
    ("agent.Error_Strategy", "error_strategy"),
    ("agent.rate_limits.openai.requests_per_minute", "rate_limits.openai.requests_per_minute"),
    ("agent.max-retrys", "max-retries"),
])
def test_misspelt_keys_names_the_option_meant_first(key, meant):
    assert misspelt_keys([key])[key][0] == meant


def test_no_declared_spelling_is_reported():
    keys = [key for _, _, option in all_options() for key in option.keys]
    assert misspelt_keys(keys) == {}


def test_a_misspelt_yaml_agent_key_is_refused_with_the_key_meant(tmp_path):
    path = tmp_path / "agents.yaml"
    path.write_text(
        "agents:\n"
        "  - name: a\n"
        "    actoins:\n"
        "      - name: go\n"
        "        function: tests.engine.test_config_key_hints:ErrorStrategyAgent.report\n"
        "        listen_to: [input]\n",
        encoding="utf-8",
    )
    env = AgentsExecutionEnvironment.get_execution_environment()
    with pytest.raises(YamlAgentError, match=r"agents\.yaml:3: agents\[0\]\.actoins: unknown key .*"
                                             r"; did you mean 'actions'\?$"):
        env.load_yaml(str(path))


def test_a_misspelt_resource_setting_in_yaml_is_refused_with_the_setting_meant(tmp_path):
    path = tmp_path / "agents.yaml"
    path.write_text(
        "chat_model_connections:\n"
        "  - name: c\n"
        "    clazz: local\n"
        "agents:\n"
        "  - name: a\n"
        "    actions:\n"
        "      - name: go\n"
        "        function: tests.engine.test_config_key_hints:ErrorStrategyAgent.report\n"
        "        listen_to: [input]\n"
        "    chat_model_setups:\n"
        "      - name: m\n"
        "        clazz: local\n"
        "        conection: c\n",
        encoding="utf-8",
    )
    env = AgentsExecutionEnvironment.get_execution_environment()
    with pytest.raises(YamlAgentError, match=r"chat_model_setups\[0\]\.conection: unknown key for LocalChatModelSetup "
                                             r".*; did you mean 'connection'"):
        env.load_yaml(str(path))
