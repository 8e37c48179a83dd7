"""Thin AWS Lambda entry points, a few lines each: the worker (:mod:`.worker`), the driver
(:mod:`.driver`) and the REST API (:mod:`.api`). All logic lives in the library.

May import: everything below it (the service, the SDK, the driver); nothing imports it.
"""
