"""`pybroker schema-registry --url URL COMMAND`: the common tasks of a schema registry (pybroker's or
Confluent's) from the shell, over its REST API.

    subjects [--deleted] [--prefix P]            versions SUBJECT
    get SUBJECT [VERSION] | get --id ID          register SUBJECT --schema-file F [--type T] [--reference N=S:V]
    check SUBJECT --schema-file F [--version V]  delete SUBJECT [--version V] [--permanent]
    config [SUBJECT] [--set LEVEL]               mode [SUBJECT] [--set MODE]

A refusal prints the registry's message and error code on one line and exits 1; `check` exits 1 when the
schema is incompatible.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from pybroker.client.command_line import ToolParser
from pybroker.client.registry_http import RegistryHttpClient, RegistryRequestError, segment

EXIT_OK, EXIT_FAILURE = 0, 1


def build_parser() -> ToolParser:
    parser = ToolParser(prog="pybroker schema-registry", description="Work with a schema registry's subjects, "
                                                                      "schemas and configs over its REST API.")
    parser.add_argument("--url", required=True, help="the registry, e.g. http://127.0.0.1:8081")
    parser.add_argument("--user", metavar="USER:PASSWORD", help="HTTP basic credentials")
    parser.add_argument("--ca-file", metavar="PEM", help="CA certificates to trust for an https:// registry")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=ToolParser)
    subjects = commands.add_parser("subjects", help="list subjects")
    subjects.add_argument("--deleted", action="store_true", help="include soft-deleted subjects")
    subjects.add_argument("--prefix", default="", help="only subjects starting with this")
    commands.add_parser("versions", help="list a subject's versions").add_argument("subject")
    get = commands.add_parser("get", help="print a schema, by subject and version or by id")
    get.add_argument("subject", nargs="?")
    get.add_argument("version", nargs="?", default="latest")
    get.add_argument("--id", type=int, help="the schema id")
    for name, summary in (("register", "register a schema under a subject (prints its id)"),
                          ("check", "check a schema's compatibility with a subject")):
        command = commands.add_parser(name, help=summary)
        command.add_argument("subject")
        command.add_argument("--schema-file", required=True, type=Path, help="the schema (- for stdin)")
        command.add_argument("--type", default="AVRO", choices=("AVRO", "JSON", "PROTOBUF"))
        command.add_argument("--reference", action="append", default=[], metavar="NAME=SUBJECT:VERSION")
        command.add_argument("--normalize", action="store_true")
    commands.choices["check"].add_argument("--version", help="check against this version only")
    delete = commands.add_parser("delete", help="delete a subject or one version (soft, then --permanent)")
    delete.add_argument("subject")
    delete.add_argument("--version")
    delete.add_argument("--permanent", action="store_true")
    for name, flag in (("config", "LEVEL"), ("mode", "MODE")):
        command = commands.add_parser(name, help=f"print or set the global or a subject's {name}")
        command.add_argument("subject", nargs="?")
        command.add_argument("--set", metavar=flag)
    return parser


def _schema_request(args: argparse.Namespace) -> dict[str, Any]:
    text = sys.stdin.read() if str(args.schema_file) == "-" else args.schema_file.read_text()
    body: dict[str, Any] = {"schema": text}
    if args.type != "AVRO":
        body["schemaType"] = args.type
    references = []
    for item in args.reference:
        name, _, target = item.partition("=")
        subject, _, version = target.rpartition(":")
        if not name or not subject or not version.lstrip("-").isdigit():
            raise ValueError(f"--reference expects NAME=SUBJECT:VERSION, got {item!r}")
        references.append({"name": name, "subject": subject, "version": int(version)})
    if references:
        body["references"] = references
    return body


def run(client: RegistryHttpClient, args: argparse.Namespace) -> int:
    command = args.command
    if command == "subjects":
        flags = "&".join(f for f, on in (("deleted=true", args.deleted), (f"subjectPrefix={segment(args.prefix)}",
                                                                           bool(args.prefix))) if on)
        print("\n".join(client.call("GET", "/subjects" + (f"?{flags}" if flags else ""))))
    elif command == "versions":
        print("\n".join(str(v) for v in client.call("GET", f"/subjects/{segment(args.subject)}/versions")))
    elif command == "get":
        if args.id is None and args.subject is None:
            raise ValueError("get needs a SUBJECT [VERSION] or --id ID")
        path = f"/schemas/ids/{args.id}" if args.id is not None else \
            f"/subjects/{segment(args.subject)}/versions/{segment(args.version)}"
        print(client.call("GET", path)["schema"])
    elif command == "register":
        normalize = "?normalize=true" if args.normalize else ""
        print(client.call("POST", f"/subjects/{segment(args.subject)}/versions{normalize}",
                          _schema_request(args))["id"])
    elif command == "check":
        target = f"/versions/{segment(args.version)}" if args.version else "/versions"
        answer = client.call("POST", f"/compatibility/subjects/{segment(args.subject)}{target}?verbose=true",
                             _schema_request(args))
        print("compatible" if answer["is_compatible"] else "incompatible")
        for message in answer.get("messages", []):
            print(message)
        return EXIT_OK if answer["is_compatible"] else EXIT_FAILURE
    elif command == "delete":
        path = f"/subjects/{segment(args.subject)}" + (f"/versions/{segment(args.version)}" if args.version else "")
        deleted = client.call("DELETE", path + ("?permanent=true" if args.permanent else ""))
        print(" ".join(str(v) for v in deleted) if isinstance(deleted, list) else deleted)
    else:  # config or mode
        path = f"/{command}" + (f"/{segment(args.subject)}" if args.subject else "")
        if args.set:
            body = {"compatibility": args.set} if command == "config" else {"mode": args.set}
            answer = client.call("PUT", path, body)
        else:
            answer = client.call("GET", path + ("?defaultToGlobal=true" if args.subject else ""))
        print(answer.get("compatibilityLevel") or answer.get("compatibility") or answer.get("mode"))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    client = RegistryHttpClient(args.url, basic_auth=args.user, ca_file=args.ca_file)
    try:
        return run(client, args)
    except ValueError as exc:
        parser.error(str(exc))
    except (RegistryRequestError, OSError) as exc:
        code = getattr(exc, "error_code", None)
        print(f"Error: {exc}" + (f" (error code {code})" if code is not None else ""), file=sys.stderr)
    return EXIT_FAILURE
