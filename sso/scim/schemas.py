"""The schemas the SCIM endpoints publish (RFC 7643 section 7): django-scim2's core schemas cut down to
the attributes Reviewer stores, so that a client (and scim2-tester) sends only what is kept. A User is its
userName, externalId, name (given and family), e-mail, active flag and groups (read-only); a Group its
displayName (required, RFC 7643 4.2), externalId and members."""

import copy

from django_scim.schemas import ALL

SCHEMA_URN = "urn:ietf:params:scim:schemas:core:2.0:Schema"
USER_URN = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP_URN = "urn:ietf:params:scim:schemas:core:2.0:Group"
KEPT = {
    USER_URN: {
        "userName": None,
        "name": {"givenName", "familyName"},
        "displayName": None,
        "active": None,
        "emails": {"value", "type", "primary"},
        "groups": {"value", "$ref", "display", "type"},
    },
    GROUP_URN: {"displayName": None, "members": {"value", "$ref", "type"}},
}
READ_ONLY = {(USER_URN, "displayName")}  # made from the names
# active: Reviewer's own rule, so that a client sets it false rather than unassigning it.
REQUIRED = {(GROUP_URN, "displayName"), (USER_URN, "active")}
EXTENSIONS = "urn:ietf:params:scim:schemas:extension:"


def _cut(schema: dict) -> dict:
    schema = copy.deepcopy(schema)
    schema["schemas"] = [SCHEMA_URN]
    schema["meta"] = {"resourceType": "Schema", "location": f"/scim/v2/Schemas/{schema['id']}"}
    kept = KEPT.get(schema["id"])
    if kept is None:
        return schema
    attributes = []
    for attribute in schema["attributes"]:
        if attribute["name"] not in kept:
            continue
        sub = kept[attribute["name"]]
        if sub is not None:
            attribute["subAttributes"] = [s for s in attribute.get("subAttributes", []) if s["name"] in sub]
            for sub_attribute in attribute["subAttributes"]:
                if (schema["id"], f"{attribute['name']}.{sub_attribute['name']}") in READ_ONLY:
                    sub_attribute["mutability"] = "readOnly"
        if (schema["id"], attribute["name"]) in READ_ONLY:
            attribute["mutability"] = "readOnly"
        if (schema["id"], attribute["name"]) in REQUIRED:
            attribute["required"] = True
        attributes.append(attribute)
    schema["attributes"] = attributes
    return schema


PUBLISHED = [_cut(schema) for schema in ALL if not schema["id"].startswith(EXTENSIONS)]


def published_schemas() -> list[dict]:
    return PUBLISHED
