"""Runpod Flash compatibility: Flash's public names that are not flashpoint's own (``names``: constants, the legacy
``remote`` decorator and resource classes, re-exports of Flash's value types) and ``runpod_flash`` resolving to
flashpoint while an app is loaded (``alias``).

Stands on the SDK: ``names`` builds ``Endpoint``s, and ``alias`` lends the ``flashpoint`` surface itself (lazily, the
one designed seam upward). Flash's value types are the vocabulary module ``flashpoint.flashtypes``, since endpoint
specs and settings are written in them.
"""
