"""Chat models deployed on Azure OpenAI, through the ``openai`` SDK's
``AzureOpenAI``/``AsyncAzureOpenAI`` clients (no extra package:
the ``azure`` extra installs nothing more).

Azure OpenAI serves a model under a deployment name: requests go to
``{azure_endpoint}/openai/deployments/{deployment}/chat/completions?api-version=...``
with an ``api-key`` header (or ``Authorization: Bearer <Entra ID token>``),
and take the chat-completions body of OpenAI. The setup's ``model`` is the
deployment name::

    ResourceDescriptor(
        clazz=ResourceName.ChatModel.AZURE_OPENAI_CONNECTION,
        azure_endpoint="https://my-resource.openai.azure.com",
        api_version="2024-10-21",  # key from AZURE_OPENAI_API_KEY
    )
    ResourceDescriptor(
        clazz=ResourceName.ChatModel.AZURE_OPENAI_SETUP,
        connection="azure", model="my-gpt-4o-deployment", model_of_azure_deployment="gpt-4o",
    )

Messages, tools, structured output (``response_format`` ``json_schema``) and
errors are those of ``openai.openai_chat_model`` (same conversions, same
error classes), with ``provider="azure"``.
"""

from __future__ import annotations

import os
from typing import Any, Callable, ClassVar, Dict, Tuple

from pydantic import Field

from flink_agents.api.chat_models.errors import ModelAuthenticationError, ModelBadRequest
from flink_agents.api.chat_models.chat_model import BaseChatModelSetup
from flink_agents.integrations.chat_models.openai.openai_chat_model import ChatCompletionsConnection
from flink_agents.integrations.sdk import import_sdk

__all__ = ["AzureOpenAIChatModelConnection", "AzureOpenAIChatModelSetup"]

API_KEY_ENV = "AZURE_OPENAI_API_KEY"
API_VERSION_ENV = "OPENAI_API_VERSION"
ENDPOINT_ENV = "AZURE_OPENAI_ENDPOINT"
# Settings with a typed setup field, which additional_kwargs must not repeat
# (as Flink Agents 0.3.1 refuses them).
_RESERVED_KWARG_KEYS = frozenset({"model", "model_of_azure_deployment", "temperature", "max_tokens", "logprobs"})


class AzureOpenAIChatModelConnection(ChatCompletionsConnection):
    """A connection to an Azure OpenAI resource.

    Credentials: ``api_key`` (sent as the ``api-key`` header), or a
    Microsoft Entra ID token: ``azure_ad_token``, or
    ``azure_ad_token_provider`` (a callable returning a token, asked before
    every request; constructor only). At most one of them; none given reads
    ``AZURE_OPENAI_API_KEY``.

    Attributes:
        api_key: The resource's key; None reads ``AZURE_OPENAI_API_KEY``.
        azure_ad_token: An Entra ID access token, instead of a key.
        azure_ad_token_provider: A callable returning a token (for the async
            client it may also be a coroutine function).
        api_version: The REST API version (e.g. ``"2024-10-21"``); None reads
            ``OPENAI_API_VERSION``.
        azure_endpoint: ``https://{resource}.openai.azure.com``; None reads
            ``AZURE_OPENAI_ENDPOINT``.
        timeout: Timeout of one HTTP request, in seconds.
        max_retries: How often the SDK retries a failed request (with backoff).
    """

    provider: ClassVar[str] = "azure"

    api_key: str | None = Field(default=None, repr=False)
    azure_ad_token: str | None = Field(default=None, repr=False)
    azure_ad_token_provider: Callable[[], Any] | None = Field(default=None, repr=False, exclude=True)
    api_version: str | None = None
    azure_endpoint: str | None = None
    timeout: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=3, ge=0)

    def _client_options(self) -> Dict[str, Any]:
        credentials = {
            name: value
            for name, value in (("api_key", self.api_key), ("azure_ad_token", self.azure_ad_token),
                                ("azure_ad_token_provider", self.azure_ad_token_provider))
            if value is not None
        }
        if len(credentials) > 1:
            raise ValueError(
                f"{type(self).__name__}: give one of api_key, azure_ad_token, azure_ad_token_provider, "
                f"not {sorted(credentials)}"
            )
        if not credentials:
            if not os.environ.get(API_KEY_ENV):
                raise ModelAuthenticationError(
                    f"{type(self).__name__}: no credentials: set api_key (or the {API_KEY_ENV} environment "
                    f"variable), azure_ad_token or azure_ad_token_provider", "azure",
                )
            credentials = {"api_key": os.environ[API_KEY_ENV]}
        api_version = self.api_version or os.environ.get(API_VERSION_ENV)
        if not api_version:
            raise ModelBadRequest(
                f"{type(self).__name__}: api_version is not set (nor the {API_VERSION_ENV} environment "
                f"variable); give the Azure OpenAI REST API version, e.g. '2024-10-21'", "azure",
            )
        endpoint = self.azure_endpoint or os.environ.get(ENDPOINT_ENV)
        if not endpoint:
            raise ModelBadRequest(
                f"{type(self).__name__}: azure_endpoint is not set (nor the {ENDPOINT_ENV} environment "
                f"variable); give https://<resource>.openai.azure.com", "azure",
            )
        return {
            **credentials, "api_version": api_version, "azure_endpoint": endpoint,
            "timeout": self.timeout, "max_retries": self.max_retries,
        }

    def _new_client(self, asynchronous: bool) -> Any:
        openai = import_sdk("openai", "azure", type(self).__name__)
        options = self._client_options()
        return openai.AsyncAzureOpenAI(**options) if asynchronous else openai.AzureOpenAI(**options)

    def _settings(self, settings: Dict[str, Any]) -> Tuple[Dict[str, Any], str | None]:
        """Take ``model_of_azure_deployment`` (the model name reported in
        ``extra_args["model_name"]``) and merge ``additional_kwargs``.

        Raises:
            ValueError: ``additional_kwargs`` repeats a typed setting (names them).
        """
        model_name = settings.pop("model_of_azure_deployment", None)
        additional = settings.pop("additional_kwargs", None) or {}
        collisions = _RESERVED_KWARG_KEYS & set(additional)
        if collisions:
            raise ValueError(
                f"additional_kwargs must not set {sorted(collisions)}: use the AzureOpenAIChatModelSetup "
                f"fields of those names"
            )
        settings.update(additional)
        return settings, model_name


class AzureOpenAIChatModelSetup(BaseChatModelSetup):
    """Which Azure OpenAI deployment to use.

    Attributes:
        model: The deployment name (the path's ``{deployment}``).
        model_of_azure_deployment: The model behind the deployment (e.g.
            ``"gpt-4o"``), reported as the reply's ``model_name`` (token
            metrics are per model name); None reports the model Azure names
            in its response.
        temperature: Sampling temperature (0..2); None is the service's
            default (reasoning models take none).
        max_tokens: Cap on the reply's tokens; None is the service's default.
        logprobs: Ask for the log probabilities of the reply's tokens.
        additional_kwargs: Further chat-completions parameters (not the
            fields above).
    """

    model_of_azure_deployment: str | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, gt=0)
    logprobs: bool | None = False
    additional_kwargs: Dict[str, Any] = Field(default_factory=dict)

    @property
    def model_kwargs(self) -> Dict[str, Any]:
        """``model`` (the deployment), then the settings that are set;
        ``additional_kwargs`` travel as one entry the connection merges."""
        kwargs = super().model_kwargs
        if self.model_of_azure_deployment:
            kwargs["model_of_azure_deployment"] = self.model_of_azure_deployment
        if self.logprobs:
            kwargs["logprobs"] = True
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if self.max_tokens is not None:
            kwargs["max_tokens"] = self.max_tokens
        if self.additional_kwargs:
            kwargs["additional_kwargs"] = dict(self.additional_kwargs)
        return kwargs
