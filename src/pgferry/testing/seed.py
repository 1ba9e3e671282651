"""The walkthrough's two main tables (user_info, user_session), for demo, tests and benches."""

from __future__ import annotations


def seed_schema(schema: str = "digoal_01", suffix: str = "") -> str:
    """DDL creating ``schema`` with user_info / user_session (``suffix`` renames them)."""
    return f"""
create schema {schema};
create table {schema}.user_info{suffix} (
    userid int primary key, engname text, cnname text, occupation text, birthday date,
    signname text, email text, qq numeric, crt_time timestamp, mod_time timestamp);
create table {schema}.user_session{suffix} (
    userid int primary key, logintime timestamp(0), login_count bigint default 0,
    logouttime timestamp(0), online_interval interval default '0');
"""


def seed_fill(users: int) -> str:
    """Rows for ``users`` users in digoal_01.user_info and user_session."""
    return f"""
insert into digoal_01.user_info
select g, 'eng' || g, 'cn' || g, 'dba', date '1970-01-01' + g % 15000, 'hello', g || '@x.org',
       10000 + g, now(), null from generate_series(1, {users}) g;
insert into digoal_01.user_session (userid) select g from generate_series(1, {users}) g;
"""
