"""A first end-to-end check: a request over a real socket gets a well-framed response."""

from tests.conftest import hello_app


def test_hello(serve, client_for):
    server = serve(hello_app)
    client = client_for(server)
    response = client.get("/")
    assert response.status == 200
    assert response.body == b"Hello, World!"
    assert response.header("Server") == "greenserve"
    assert response.header("Date")
