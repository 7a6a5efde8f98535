"""ssl.principal.mapping.rules as Kafka parses and applies them (SslPrincipalMapperTest's cases),
and the subject DN in Java's RFC 2253 form."""

from __future__ import annotations

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from pybroker.common.config import ConfigError
from pybroker.security.dev_certs import make_dev_certs
from pybroker.security.principal import ANONYMOUS, NoMatchingRule, PrincipalMapper, rfc2253_subject


@pytest.mark.parametrize("rules", [
    "DEFAULT",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/U",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
    "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/,DEFAULT",
])
def test_valid_rules_parse(rules: str) -> None:
    assert PrincipalMapper(rules).rules


@pytest.mark.parametrize("rules", ["DEFAULT/L", "DEFAULT/U", "RULE:/", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1",
                                   "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U", "RULE:^CN=(.*?),OU=.*$/$1/LU"])
def test_invalid_rules_fail_naming_the_key(rules: str) -> None:
    with pytest.raises(ConfigError, match="ssl.principal.mapping.rules"):
        PrincipalMapper(rules)


def test_rules_apply_in_order_with_case_and_default() -> None:
    mapper = PrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),"
                             "ST=(.*?),C=(.*?)$/$1@$2/L,RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,DEFAULT")
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "Duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("O=x,cn=Duke.2,C=US") == "DUKE.2"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


def test_no_matching_rule_refuses() -> None:
    with pytest.raises(NoMatchingRule, match="No rules apply to OU=x"):
        PrincipalMapper("RULE:^CN=(.*)$/$1/").name("OU=x")


def test_back_references_beyond_the_groups_stay_literal() -> None:
    mapper = PrincipalMapper("RULE:^CN=(.*?),OU=(.*?)$/$1@$3 $12/")
    assert mapper.name("CN=a,OU=b") == "a@$3 a2"


def test_certificate_subject_is_rfc2253_last_rdn_first(tmp_path) -> None:
    certs = make_dev_certs(tmp_path, client_name="alice, the \"admin\"")
    pem = certs.client.read_bytes()
    certificate = x509.load_pem_x509_certificate(pem[pem.index(b"-----BEGIN CERTIFICATE-----"):])
    der = certificate.public_bytes(serialization.Encoding.DER)
    assert rfc2253_subject(der) == 'CN=alice\\, the \\"admin\\",OU=clients,O=pybroker-dev,C=US'
    assert str(PrincipalMapper("RULE:^CN=([^,\\\\]*).*$/$1/").principal(der)) == "User:alice"
    assert PrincipalMapper().principal(None) is ANONYMOUS
