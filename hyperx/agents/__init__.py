"""Value-based agents: ONE core (:mod:`hyperx.agents.core`) and its named configurations."""

from hyperx.agents.config import AGENT_NAMES, ATARI_AGENT_NAMES, AgentConfig, get_config
from hyperx.agents.core import Agent, AgentState, Transition, make_agent

__all__ = ["AGENT_NAMES", "ATARI_AGENT_NAMES", "Agent", "AgentConfig", "AgentState",
           "Transition", "get_config", "make_agent"]
