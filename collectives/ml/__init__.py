"""Pipelines as the lectures draw them: stages fitted in order, each over every rank's rows.

``python -m collectives ml`` runs the text example on the bundled corpus (collectives.ml.corpus).
"""
