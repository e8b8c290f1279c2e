"""The engine and its services: one assembly builds the engine from settings
(``assembly``, ``settings``); ``services`` are the faces' only door; the job controller
applies conditions, transitions and policies (``controller``, ``admitter``, ``policies``)."""
