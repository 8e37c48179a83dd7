"""The Exchange interface (``base``: endpoints, factories, their registry, errors) and
its implementations: ``local`` (a shared folder), ``s3`` (write-combined, one or two
levels) and ``fabric`` (libfabric RMA writes, native module optional).

May import: :mod:`squall.errors`, :mod:`squall.registry`, :mod:`squall.aws` — nothing
else of Squall (not the plan, the operators or the driver).
"""
