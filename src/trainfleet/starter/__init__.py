"""The warm starter: ``trainfleet`` commands forked from a process that has imported them.

A cold ``trainfleet run`` spends most of its first 250 ms importing (click, pydantic and the
job models, the engine, the store). ``client`` is the ``trainfleet`` console script: standard
library only, it hands its command to this user's ``server`` (one per interpreter, source
tree, cgroup and namespaces, started in the background after a cold run, gone after 10 idle
minutes), whose forked child ``takeover`` becomes the client's process (its terminal, working
folder, environment, limits, signals) and runs the CLI, while the client forwards signals and
exits as the child did. Anything amiss, and the client runs the command itself.
``TRAINFLEET_STARTER=off`` turns it off.
"""
