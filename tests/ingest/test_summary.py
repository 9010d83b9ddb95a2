"""A session note's offline summary says what the session was about and what was established, each
line a whole sentence: continue splits joined first, small talk and pasted material left out."""

from __future__ import annotations

from vault_pipeline import pipeline
from vault_pipeline.ingest.extract import AtomicUnit
from vault_pipeline.ingest.parse import Conversation, Message
from vault_pipeline.ingest.select import Selector
from vault_pipeline.ingest.summary import healed, session_summary, whole
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.models.offline.statements import sentences

EVERY = Selector({}, 0.0, write=0.0, keep=0.0)


def conv(*turns: tuple[str, str], title: str = "Deploying the shop") -> Conversation:
    messages = tuple(Message(f"m{n}", role, role, text, None) for n, (role, text) in enumerate(turns, 1))
    return Conversation("chatgpt", "c1", title, None, None, messages, "x")


def unit(text: str, source: str, speaker: str = "user", category: str = "fact") -> AtomicUnit:
    return AtomicUnit(text=text, category=category, source_ids=[source], speaker=speaker)  # type: ignore[arg-type]


def lines(summary: str) -> list[str]:
    """Every sentence of the summary's speaker paragraphs, label taken off."""
    paragraphs = summary.split("\n\n")[1:]
    return [s for p in paragraphs for s in sentences(p.split(": ", 1)[1])]


CUT = (
    ("user", "How do I deploy the static files with the collectstatic step?"),
    ("assistant", "Run collectstatic in the build step. Give every file a content hash in its name"),
    ("user", "continue"),
    ("assistant", "tag to prevent overwriting. The bucket then serves the files with a long cache time."),
)


def test_a_continue_split_is_joined_before_anything_is_taken_from_it():
    turns = healed(conv(*CUT).messages)
    assert [t.role for t in turns] == ["user", "assistant"]
    assert turns[1].ids == ["m2", "m3", "m4"]
    assert "Give every file a content hash in its name tag to prevent overwriting." in turns[1].said()
    # The selector wrote the cut piece as a note: it opens no sentence of the healed answer, so the
    # summary does not take it; the answer's whole sentences it may.
    summary = session_summary(conv(*CUT), [unit("Tag to prevent overwriting.", "m4", "assistant")], [0.9])
    assert not any(s.lower().startswith("tag to prevent") for s in lines(summary))
    assert "User: How do I deploy the static files with the collectstatic step?" in summary
    assert "Assistant: Run collectstatic in the build step." in summary


def test_continue_generating_two_answers_in_a_row_are_one_turn():
    split = conv(
        ("user", "Give me a Terraform template for the shop."),
        ("assistant", "Here it is. For a production setup you would also take into consideration"),
        ("assistant", "various other factors like backups for Cloud SQL and IAM permissions."),
    )
    turns = healed(split.messages)
    assert len(turns) == 2 and turns[1].ids == ["m2", "m3"]
    summary = session_summary(split, [unit("Various other factors like backups for Cloud SQL.", "m3", "assistant")])
    assert not any(s.lower().startswith("various other") for s in lines(summary))
    assert summary.startswith("Session “Deploying the shop”: 2 turns between the user and the assistant.")


def test_a_first_turn_of_small_talk_is_left_out_and_the_real_ask_opens_the_summary():
    chat = conv(
        ("user", "Hi! How are you today?"),
        ("assistant", "I'm doing well, thank you. How can I help?"),
        ("user", "I run a webshop on Django. Which host should I use for the static files?"),
        ("assistant", "A storage bucket behind a CDN serves static files cheaply."),
    )
    summary = session_summary(chat, [unit("I run a webshop on Django.", "m3")], [0.8], subjects=["Django"])
    head, user, assistant = summary.split("\n\n")
    assert head == "Session “Deploying the shop”: 4 turns between the user and the assistant, about Django."
    assert user == "User: I run a webshop on Django. Which host should I use for the static files?"
    assert assistant == "Assistant: A storage bucket behind a CDN serves static files cheaply."
    assert "Hi" not in summary.split("\n\n", 1)[1]


def test_the_users_kept_statements_and_the_notes_written_say_what_was_established():
    chat = conv(
        ("user", "Which database should the shop use?"),
        ("assistant", "Sure! PostgreSQL suits a small shop. It also runs on Cloud SQL, which handles backups for you."),
        ("user", "OK, I'll use PostgreSQL on Cloud SQL. The shop has about ten orders a day."),
        ("assistant", "Then the smallest Cloud SQL tier is enough for ten orders a day."),
    )
    units = [
        unit("I'll use PostgreSQL on Cloud SQL.", "m3", category="decision"),
        unit("The shop has about ten orders a day.", "m3"),
        unit("The smallest Cloud SQL tier is enough for ten orders a day.", "m4", "assistant"),  # a clause
        unit("PostgreSQL suits a small shop.", "m2", "assistant"),
        unit("It also runs on Cloud SQL, which handles backups for you.", "m2", "assistant"),  # points back
    ]
    summary = session_summary(chat, units, [0.9, 0.7, 0.6, 0.5, 0.95])
    user, assistant = summary.split("\n\n")[1:]
    assert user == (
        "User: Which database should the shop use? OK, I'll use PostgreSQL on Cloud SQL. "
        "The shop has about ten orders a day."
    )
    assert assistant == "Assistant: PostgreSQL suits a small shop."
    assert all(whole(s) for s in lines(summary))


def test_of_a_long_pasted_turn_only_the_users_own_sentences_are_taken():
    # Pasted material comes on lines of its own, as the real export's slides and CVs do.
    slides = "\n\n".join(
        f"Slide {n} covers the {n}th property of multivariate data sets in detail." for n in range(1, 16)
    )
    chat = conv(
        ("user", f"I will give you my course slides, please write three quiz questions about them:\n\n{slides}"),
        ("assistant", "Question 1: Which property does slide 3 cover?"),
        ("user", f"{slides}\n\nI want the questions in Dutch."),
    )
    units = [unit("Slide 4 covers the 4th property of multivariate data sets in detail.", "m3")]
    summary = session_summary(chat, units, [0.99])
    assert summary.split("\n\n")[1] == (
        "User: I will give you my course slides, please write three quiz questions about them. "
        "I want the questions in Dutch."
    )
    assert "Slide 4" not in summary


def test_named_speakers_each_get_their_paragraph():
    chat = Conversation(
        "locomo",
        "c2",
        "Caroline and Melanie, session 1",
        None,
        None,
        (
            Message("d1", "user", "Caroline", "I went to a support group yesterday and it was so powerful.", None),
            Message("d2", "assistant", "Melanie", "That is great! I painted a lake at sunrise last week.", None),
        ),
        "x",
        titled=False,
    )
    summary = session_summary(chat, [unit("I painted a lake at sunrise last week.", "d2", "assistant")])
    assert summary.split("\n\n") == [
        "Session “Caroline and Melanie, session 1”: 2 turns between Caroline and Melanie.",
        "Caroline: I went to a support group yesterday and it was so powerful.",
        "Melanie: I painted a lake at sunrise last week.",
    ]


def test_ingest_writes_the_summary_into_the_session_note(make_vault, tmp_path):
    source = tmp_path / "shop.md"
    source.write_text(
        "# Deploying the shop\n\n**You:** Hi there!\n\n**ChatGPT:** Hello! How can I help?\n\n"
        "**You:** I'll host the shop on Cloud Run. Does Cloud Run scale to zero?\n\n"
        "**ChatGPT:** Yes, Cloud Run scales to zero when no requests come in, so an idle shop costs nothing.\n",
        encoding="utf-8",
    )
    vault = make_vault()
    pipeline.ingest(vault, [source], OfflineBackend(), selector=EVERY)
    (relpath,) = [p for p in vault.iter_note_paths() if p.startswith("sessions/")]
    _, body, _ = vault.read(relpath)
    said = body.split("## Summary\n\n", 1)[1].split("\n\n## Transcript", 1)[0]
    assert said.split("\n\n")[1] == "User: I'll host the shop on Cloud Run. Does Cloud Run scale to zero?"
    assert said.split("\n\n")[2].startswith("Assistant: Yes, Cloud Run scales to zero when no requests come in")
    assert "Hi there" not in said and "Hello" not in said
