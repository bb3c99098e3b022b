"""Container entry points, one per step: `python -m jobs.<step> --store URI --spec JSON`."""
