"""Request body shapes checked from the JSON schema declared on a Route.

The schema language itself is core/shapes.py, shared with the record tables
(core/records.py) so that a record's API bodies and answers are built from the
same declarations as its restore checks. The router checks bodies with
check(); the routes' declarations use the constructors named here.
"""

from contentnode.core.shapes import (BOOLEAN, KEYWORDS, STRING, answer, array, check, integer, listing, nullable, obj,
                                     one_of, refused, text)

__all__ = ["BOOLEAN", "KEYWORDS", "STRING", "answer", "array", "check", "integer", "listing", "nullable", "obj",
           "one_of", "refused", "text"]
