"""The ``trainfleet`` command: ``main`` holds the global options and a table of commands,
each group's module (``*_commands``) loaded only when it runs; they call the control
services, embedded (``embedded``) or on a server (``remote``), chosen by ``factory``."""
