"""The console's web application: Starlette routes rendering Jinja2 templates from data read over the wire.

Every write (a POST) is refused unless the console was started with --allow-writes, and asks for
confirmation first: the first POST renders a page describing the change (with a preview for offset
resets), whose button posts the same fields again with ``confirmed=yes``. The broker's error text is
shown when it refuses; a cluster that cannot be reached shows a banner instead of the page.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import AsyncIterator, Awaitable, Callable
from urllib.parse import urlencode

import jinja2
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from pybroker.client.group_offsets import INACTIVE_STATES
from pybroker.client.offset_reset import ResetPlan, plan_reset
from pybroker.client.command_line import ClientSettings, CommandError, UsageError
from pybroker.client import AdminClient, KafkaClient, KafkaClientError, NewTopic, Producer, ResponseError
from pybroker.client.acl_admin import create_acls, delete_acls, describe_acls
from pybroker.client.admin import TOPIC_RESOURCE
from pybroker.client.groups import GroupAdmin
from pybroker.client.registry_http import RegistryRequestError
from pybroker.client.scram_admin import ScramUpsertion, alter_user_scram_credentials, describe_user_scram_credentials
from pybroker.common.topic import TopicPartition
from pybroker.console import cluster_views
from pybroker.console import schemas as schemas_view
from pybroker.console import share_views
from pybroker.console.charts import line_chart
from pybroker.console.messages import MAX_LIMIT, MODES, BrowseError, Search, browse, one_record
from pybroker.console.sampler import Sampler
from pybroker.console.session import UNREACHABLE, ClusterSession
from pybroker.records import RecordInput
from pybroker.security.acl import (
    ANY_BINDING,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from pybroker.security.sasl.scram import MECHANISMS

SESSION_COOKIE = "pybroker_console"
CHART_TOPICS = 10  # the busiest topics get a line each
READ_ONLY_TEXT = "The console is read-only: start it with --allow-writes to change the cluster."


@dataclass(frozen=True, slots=True)
class ConsoleConfig:
    settings: ClientSettings
    allow_writes: bool = False
    password: str | None = None
    sample_interval_s: float = 10.0
    schema_registry_url: str | None = None


class Refused(Exception):
    """A write the console will not send (bad form input), shown like a broker's refusal."""


def create_app(config: ConsoleConfig) -> Starlette:
    session = ClusterSession(config.settings)
    sampler = Sampler(session, config.sample_interval_s)
    logins: set[str] = set()
    templates = Jinja2Templates(env=jinja2.Environment(
        loader=jinja2.PackageLoader("pybroker.console", "templates"), autoescape=True))
    templates.env.globals.update(bootstrap=config.settings.bootstrap, allow_writes=config.allow_writes,
                                 login_required=config.password is not None)
    templates.env.filters["size"] = _human_size
    templates.env.filters["when"] = _when

    def render(request: Request, name: str, context: dict, status: int = 200) -> Response:
        return templates.TemplateResponse(request, name, {"notice": request.query_params.get("notice"), **context},
                                          status_code=status)

    async def page(request: Request, name: str, load: Callable[[KafkaClient], Awaitable[dict]]) -> Response:
        """A read-only page: its data, or the banner when the cluster cannot be reached."""
        try:
            return render(request, name, await session.run(load))
        except UNREACHABLE as exc:
            return render(request, "unreachable.html", {"error": str(exc)}, 503)
        except (ResponseError, BrowseError) as exc:
            return render(request, "error.html", {"error": str(exc), "back": request.url.path}, 404)

    async def write(request: Request, summary: str, back: str,
                    operation: Callable[[KafkaClient, FormData], Awaitable[str]],
                    preview: Callable[[KafkaClient, FormData], Awaitable[dict]] | None = None) -> Response:
        form = await request.form()
        if not config.allow_writes:
            return render(request, "error.html", {"error": READ_ONLY_TEXT, "back": back}, 403)
        try:
            if form.get("confirmed") != "yes":
                extra = await session.run(lambda c: preview(c, form)) if preview is not None else {}
                fields = [(k, v) for k, v in form.multi_items() if isinstance(v, str)]
                return render(request, "confirm.html", {"summary": summary, "fields": fields, "back": back,
                                                        "action": request.url.path, **extra})
            done = await session.run(lambda c: operation(c, form))
        except UNREACHABLE as exc:
            return render(request, "unreachable.html", {"error": str(exc)}, 503)
        except (KafkaClientError, Refused, CommandError, UsageError, ValueError) as exc:
            return render(request, "error.html", {"error": str(exc), "summary": summary, "back": back}, 400)
        return RedirectResponse(f"{back}?{_query(notice=done)}", status_code=303)

    async def overview(request: Request) -> Response:
        async def load(client: KafkaClient) -> dict:
            return {"overview": await cluster_views.overview(client)}
        return await page(request, "overview.html", load)

    async def topics(request: Request) -> Response:
        query = request.query_params.get("q", "").strip()

        async def load(client: KafkaClient) -> dict:
            rows = await cluster_views.topic_rows(client)
            shown = [r for r in rows if query.lower() in r.name.lower()]
            return {"rows": shown, "total": len(rows), "q": query,
                    "rates": {r.name: sampler.latest_in_rate(r.name) for r in shown}}
        return await page(request, "topics.html", load)

    async def create_topic(request: Request) -> Response:
        form = await request.form()
        name = str(form.get("name", "")).strip()

        async def create(client: KafkaClient, form: FormData) -> str:
            topic = NewTopic(name, _int(form, "partitions", -1), _int(form, "replication_factor", -1),
                             configs=_key_values(str(form.get("configs", ""))))
            (await AdminClient(client).create_topics([topic]))[name].raise_error()
            return f"Created topic {name}."
        return await write(request, f"Create topic '{name}'", "/topics", create)

    async def topic(request: Request) -> Response:
        name = request.path_params["name"]

        async def load(client: KafkaClient) -> dict:
            return {"topic": await cluster_views.topic_detail(client, name)}
        return await page(request, "topic.html", load)

    async def add_partitions(request: Request) -> Response:
        name = request.path_params["name"]
        count = (await request.form()).get("count")

        async def grow(client: KafkaClient, form: FormData) -> str:
            (await AdminClient(client).create_partitions({name: _int(form, "count")}))[name].raise_error()
            return f"Topic {name} now has {_int(form, 'count')} partitions."
        return await write(request, f"Grow topic '{name}' to {count} partitions", f"/topics/{name}", grow)

    async def alter_configs(request: Request) -> Response:
        name = request.path_params["name"]
        form = await request.form()
        key, value, remove = str(form.get("key", "")).strip(), str(form.get("value", "")), form.get("remove") == "yes"

        async def alter(client: KafkaClient, form: FormData) -> str:
            if not key:
                raise Refused("Give the name of the config")
            await AdminClient(client).incremental_alter_configs(
                TOPIC_RESOURCE, name, set_configs={} if remove else {key: value}, delete_configs=[key] if remove else [])
            return f"Removed the override of {key}." if remove else f"Set {key}={value}."
        summary = f"Remove the override of {key} on topic '{name}'" if remove \
            else f"Set {key}={value} on topic '{name}'"
        return await write(request, summary, f"/topics/{name}", alter)

    async def delete_topic(request: Request) -> Response:
        name = request.path_params["name"]

        async def delete(client: KafkaClient, _: FormData) -> str:
            (await AdminClient(client).delete_topics([name]))[name].raise_error()
            return f"Deleted topic {name}."
        return await write(request, f"Delete topic '{name}' and all its messages", "/topics", delete)

    async def produce(request: Request) -> Response:
        name = request.path_params["name"]

        async def send(client: KafkaClient, form: FormData) -> str:
            key = str(form.get("key", ""))
            record = RecordInput(key.encode() if key else None, str(form.get("value", "")).encode(),
                                 [(k, v.encode()) for k, v in _key_values(str(form.get("headers", ""))).items()])
            producer = Producer(client, auto_create_topics=False)
            partition = str(form.get("partition", "")).strip()
            batches = {TopicPartition(name, int(partition)): [record]} if partition \
                else await producer.partition_records(name, [record])
            for tp, result in (await producer.send(batches)).items():
                if result.error is not None:
                    raise result.error
                return f"Produced to partition {tp.partition} at offset {result.base_offset}."
            raise Refused("Nothing was produced")
        return await write(request, f"Produce a message to topic '{name}'", f"/topics/{name}/messages", send)

    async def messages(request: Request) -> Response:
        name = request.path_params["name"]
        params = request.query_params
        partition = params.get("partition", "")
        search = Search(partitions=[int(partition)] if partition.isdigit() else None,
                        mode=params.get("mode", "newest") if params.get("mode") in MODES else "newest",
                        limit=min(max(_param_int(params.get("limit"), 50) or 1, 1), MAX_LIMIT),
                        offset=_param_int(params.get("offset"), None), timestamp=params.get("timestamp") or None,
                        text_filter=params.get("filter", ""), read_committed=params.get("isolation") == "committed")

        async def load(client: KafkaClient) -> dict:
            described = (await AdminClient(client).describe_topics([name]))[name]
            return {"topic": name, "partitions": [p.partition for p in described.partitions], "search": search,
                    "records": await browse(client, name, search), "params": params, "partition": partition,
                    "tail": params.get("tail") == "on", "query": str(request.url.query)}
        return await page(request, "messages_table.html" if params.get("fragment") else "messages.html", load)

    async def message(request: Request) -> Response:
        name, partition, offset = (request.path_params[k] for k in ("name", "partition", "offset"))

        async def load(client: KafkaClient) -> dict:
            found = await one_record(client, name, partition, offset)
            if found is None:
                raise BrowseError(f"No message at offset {offset} of partition {partition}")
            return {"topic": name, "r": found}
        return await page(request, "message.html", load)

    async def groups(request: Request) -> Response:
        async def load(client: KafkaClient) -> dict:
            return {"rows": await cluster_views.group_rows(client)}
        return await page(request, "groups.html", load)

    async def group(request: Request) -> Response:
        group_id = request.path_params["group"]

        async def load(client: KafkaClient) -> dict:
            detail = await cluster_views.group_detail(client, group_id)
            if detail.description.state == "Dead":
                raise BrowseError(f"Consumer group '{group_id}' does not exist.")
            topics = sorted({r.topic for r in detail.rows})
            return {"group": detail, "topics": topics, "inactive": detail.description.state in INACTIVE_STATES}
        return await page(request, "group.html", load)

    async def share_group(request: Request) -> Response:
        group_id = request.path_params["group"]

        async def load(client: KafkaClient) -> dict:
            return {"group": await share_views.share_group_detail(client, group_id)}
        return await page(request, "share_group.html", load)

    async def reset_group(request: Request) -> Response:
        group_id = request.path_params["group"]
        form = await request.form()
        mode = str(form.get("to", ""))

        async def plan(client: KafkaClient, form: FormData) -> ResetPlan:
            groups = GroupAdmin(client)
            state = (await groups.describe_group(group_id)).state
            if state not in INACTIVE_STATES:
                raise Refused(f"Assignments can only be reset if the group '{group_id}' is inactive, but the "
                              f"current state is {state}.")
            return await plan_reset(AdminClient(client), groups, group_id, _reset_arguments(form))

        async def preview(client: KafkaClient, form: FormData) -> dict:
            found = await plan(client, form)
            return {"plan": sorted(found.offsets.items(), key=lambda i: (i[0].topic, i[0].partition)),
                    "warnings": found.warnings}

        async def reset(client: KafkaClient, form: FormData) -> str:
            found = await plan(client, form)
            await GroupAdmin(client).commit_offsets(group_id, found.offsets)
            return f"Reset {len(found.offsets)} offsets of group {group_id}."
        return await write(request, f"Reset the offsets of group '{group_id}' to {mode}", f"/groups/{group_id}",
                           reset, preview)

    async def delete_group(request: Request) -> Response:
        group_id = request.path_params["group"]

        async def delete(client: KafkaClient, _: FormData) -> str:
            await GroupAdmin(client).delete_group(group_id)
            return f"Deleted group {group_id}."
        return await write(request, f"Delete consumer group '{group_id}' and its offsets", "/groups", delete)

    async def charts(request: Request) -> Response:
        inbound, outbound = sampler.rates()
        lags = sampler.lags()
        busiest = sorted(inbound.values, key=lambda t: -sum(inbound.values[t]))[:CHART_TOPICS]
        charts = {
            "in": line_chart("Messages in per second", inbound.times, {t: inbound.values[t] for t in busiest}),
            "out": line_chart("Messages out per second (committed by groups)", outbound.times,
                              {t: outbound.values[t] for t in busiest if t in outbound.values}),
            "lag": line_chart("Lag per group", lags.times, lags.values),
        }
        return render(request, "charts.html", {"charts": charts, "interval": config.sample_interval_s,
                                               "samples": len(sampler.samples)})

    async def acls(request: Request) -> Response:
        async def load(client: KafkaClient) -> dict:
            try:
                bindings = await describe_acls(client, ANY_BINDING)
                error = None
            except ResponseError as exc:  # e.g. SECURITY_DISABLED: no authorizer configured
                bindings, error = [], str(exc)
            return {"bindings": bindings, "error": error, "resource_types": _names(ResourceType, 2),
                    "pattern_types": ["LITERAL", "PREFIXED"], "operations": _names(AclOperation, 2),
                    "permissions": ["ALLOW", "DENY"]}
        return await page(request, "acls.html", load)

    async def add_acl(request: Request) -> Response:
        binding = _acl_binding(await request.form())

        async def add(client: KafkaClient, _: FormData) -> str:
            [error] = await create_acls(client, [binding])
            if error is not None:
                raise error
            return "Added the ACL."
        return await write(request, f"Add ACL {binding.entry} on {binding.pattern}", "/acls", add)

    async def remove_acl(request: Request) -> Response:
        binding = _acl_binding(await request.form())
        exact = AclBindingFilter(
            ResourcePatternFilter(binding.pattern.resource_type, binding.pattern.name, binding.pattern.pattern_type),
            AccessControlEntryFilter(binding.entry.principal, binding.entry.host, binding.entry.operation,
                                     binding.entry.permission))

        async def remove(client: KafkaClient, _: FormData) -> str:
            [deleted] = await delete_acls(client, [exact])
            return f"Removed {len(deleted)} ACL(s)."
        return await write(request, f"Remove ACL {binding.entry} on {binding.pattern}", "/acls", remove)

    async def users(request: Request) -> Response:
        async def load(client: KafkaClient) -> dict:
            try:
                found, error = await describe_user_scram_credentials(client), None
            except ResponseError as exc:
                found, error = {}, str(exc)
            return {"users": found, "error": error, "mechanisms": sorted(MECHANISMS)}
        return await page(request, "users.html", load)

    async def alter_user(request: Request) -> Response:
        form = await request.form()
        user, mechanism, delete = str(form.get("user", "")), str(form.get("mechanism", "")), form.get("delete") == "yes"

        async def alter(client: KafkaClient, form: FormData) -> str:
            if mechanism not in MECHANISMS or not user:
                raise Refused("Give a user and one of " + ", ".join(sorted(MECHANISMS)))
            results = await alter_user_scram_credentials(
                client, [] if delete else [ScramUpsertion(user, mechanism, str(form.get("password", "")))],
                [(user, mechanism)] if delete else [])
            error = results.get(user)
            if error is not None:
                raise error
            return f"Deleted {mechanism} credentials of {user}." if delete else f"Set {mechanism} credentials of {user}."
        verb = "Delete" if delete else "Set"
        return await write(request, f"{verb} the {mechanism} credentials of user '{user}'", "/users", alter)

    async def schemas(request: Request) -> Response:
        if config.schema_registry_url is None:
            return render(request, "schemas.html", {"registry": None})
        try:
            level, rows = await schemas_view.subjects(config.schema_registry_url)
        except RegistryRequestError as exc:
            return render(request, "error.html", {"error": str(exc), "back": "/"}, 503)
        return render(request, "schemas.html", {"registry": config.schema_registry_url, "level": level, "rows": rows})

    async def subject(request: Request) -> Response:
        name = request.path_params["subject"]
        if config.schema_registry_url is None:
            return RedirectResponse("/schemas", status_code=303)
        try:
            level, versions = await schemas_view.subject_versions(config.schema_registry_url, name)
        except RegistryRequestError as exc:
            return render(request, "error.html", {"error": str(exc), "back": "/schemas"}, 404)
        return render(request, "subject.html", {"subject": name, "level": level, "versions": versions})

    async def login(request: Request) -> Response:
        if request.method == "GET":
            return render(request, "login.html", {})
        form = await request.form()
        if config.password is None or not hmac.compare_digest(str(form.get("password", "")), config.password):
            return render(request, "login.html", {"error": "Wrong password."}, 401)
        token = secrets.token_urlsafe(32)
        logins.add(token)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(SESSION_COOKIE, token, httponly=True, samesite="strict")
        return response

    async def logout(request: Request) -> Response:
        logins.discard(request.cookies.get(SESSION_COOKIE, ""))
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE)
        return response

    async def require_login(request: Request, call_next: RequestResponseEndpoint) -> Response:
        if config.password is None or request.url.path == "/login" \
                or request.cookies.get(SESSION_COOKIE) in logins:
            return await call_next(request)
        return RedirectResponse("/login", status_code=303)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        sampler.start()
        yield
        await sampler.stop()
        await session.close()

    routes = [
        Route("/", overview), Route("/topics", topics), Route("/topics", create_topic, methods=["POST"]),
        Route("/topics/{name}", topic), Route("/topics/{name}/partitions", add_partitions, methods=["POST"]),
        Route("/topics/{name}/configs", alter_configs, methods=["POST"]),
        Route("/topics/{name}/delete", delete_topic, methods=["POST"]),
        Route("/topics/{name}/produce", produce, methods=["POST"]),
        Route("/topics/{name}/messages", messages),
        Route("/topics/{name}/messages/{partition:int}/{offset:int}", message),
        Route("/groups", groups), Route("/groups/{group}", group),
        Route("/groups/{group}/reset", reset_group, methods=["POST"]),
        Route("/groups/{group}/delete", delete_group, methods=["POST"]), Route("/share-groups/{group}", share_group),
        Route("/charts", charts),
        Route("/acls", acls), Route("/acls/add", add_acl, methods=["POST"]),
        Route("/acls/remove", remove_acl, methods=["POST"]),
        Route("/users", users), Route("/users", alter_user, methods=["POST"]),
        Route("/schemas", schemas), Route("/schemas/{subject:path}", subject),
        Route("/login", login, methods=["GET", "POST"]), Route("/logout", logout, methods=["POST"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan,
                     middleware=[Middleware(BaseHTTPMiddleware, dispatch=require_login)])


def _reset_arguments(form: FormData) -> argparse.Namespace:
    """The form as consumer-groups --reset-offsets flags, so the tool's planning is reused as it is."""
    to, value = str(form.get("to", "")), str(form.get("value", "")).strip()
    if to not in ("earliest", "latest", "offset", "timestamp"):
        raise Refused("Choose where to reset to: earliest, latest, offset or timestamp")
    if to in ("offset", "timestamp") and not value:
        raise Refused(f"Give the {to} to reset to")
    when = value
    if to == "timestamp" and value.isdigit():
        when = datetime.fromtimestamp(int(value) / 1000, tz=timezone.utc).isoformat()
    topic = str(form.get("topic", "")).strip()
    return argparse.Namespace(
        to_earliest=to == "earliest", to_latest=to == "latest", to_current=False,
        to_offset=value if to == "offset" else None, shift_by=None,
        to_datetime=when if to == "timestamp" else None, by_duration=None,
        all_topics=not topic, topic=[topic] if topic else [])


def _acl_binding(form: FormData) -> AclBinding:
    def text(key: str) -> str:
        return str(form.get(key, "")).strip()
    return AclBinding(ResourcePattern(ResourceType.parse(text("resource_type")), text("resource_name"),
                                      PatternType.parse(text("pattern_type") or "LITERAL")),
                      AccessControlEntry(text("principal"), text("host") or "*", AclOperation.parse(text("operation")),
                                         AclPermissionType.parse(text("permission") or "ALLOW")))


def _names(kind: type[enum.IntEnum], first: int) -> list[str]:
    return [member.name for member in kind if member.value >= first]


def _key_values(text: str) -> dict[str, str]:
    """`name=value` lines (headers, configs); a line without `=` is refused."""
    found = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise Refused(f"Expected name=value, got {line!r}")
        found[name.strip()] = value
    return found


def _int(form: FormData, key: str, default: int | None = None) -> int:
    text = str(form.get(key, "")).strip()
    if not text and default is not None:
        return default
    try:
        return int(text)
    except ValueError:
        raise Refused(f"{key.replace('_', ' ')} must be a whole number, got {text!r}") from None


def _param_int(text: str | None, default: int | None) -> int | None:
    try:
        return int(text) if text not in (None, "") else default
    except ValueError:
        return default


def _query(**params: str) -> str:
    return urlencode(params)


def _human_size(size: int | None) -> str:
    if size is None:
        return "–"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(size)


def _when(ms: int) -> str:
    if ms < 0:
        return "–"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"

