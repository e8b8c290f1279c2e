"""What the user writes: job models (``models``), loading (``loading``) and importers.

Nothing is imported here, so that a module of this package (``quantity``, ``frameworks``)
loads without the pydantic models.
"""
