"""Attack modules replayed by ``scripts/replay_attacks.py`` against a running gpufleet server.

Each module here exposes ``run(ctx: Ctx) -> list[Result]``: it performs the attacks of one area as a hostile
user would (over HTTP, with tokens of the roles it needs) and reports, per attack, whether the server held.
"""
