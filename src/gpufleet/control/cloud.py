"""The cloud world's decisions, as the service asks for them: the next link of the chain when a launch is refused
for capacity, and when a quota increase must be filed. The decisions live in place/ and procure/; worlds reach them
through control/ (the import contract in pyproject.toml)."""

from gpufleet.place.launch import next_link
from gpufleet.procure.quota_increase import draft_increase, usual_turnaround_s

__all__ = ["draft_increase", "next_link", "usual_turnaround_s"]
