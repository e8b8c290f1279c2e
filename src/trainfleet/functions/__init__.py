"""A Python function run as a distributed job: ``Client.run`` (a server) and
``trainfleet.run`` (this machine's engine).

The call is pickled with cloudpickle (``payload``), sent inside the caller's folder as an
ordinary job whose tasks run ``trainfleet run-function`` (``job``), followed with its logs
until it ends (``call``), and answered with rank 0's result or the remote error
(``outcome``).
"""
